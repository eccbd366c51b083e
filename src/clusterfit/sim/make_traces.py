"""Write the small sample traces shipped in ``clusterfit/sim/traces/`` (deterministic).

    python -m clusterfit.sim.make_traces [--out DIR]

They are synthetic: generated here from clusterfit's own workload generators, in the column layouts
of the public Azure LLM inference traces (TIMESTAMP, ContextTokens, GeneratedTokens) and of BurstGPT
(Timestamp, Model, Request tokens, Response tokens, Total tokens, Log Type), plus a JSONL file of
multi-turn agent sessions. Their shapes (long code prompts with short answers, chat prompts with
longer answers, bursty arrivals) are chosen to resemble those traces; no row is copied from them.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

from .config import ArrivalSpec, SampledLengthSpec, SessionSpec
from .requests import generate

OUT = Path(__file__).parent / "traces"


def _azure(path: Path, seed: int, n: int, rate: float, isl: SampledLengthSpec, osl: SampledLengthSpec) -> None:
    rng = np.random.default_rng(seed)
    req = generate(n, ArrivalSpec(process="gamma", rate_rps=rate, cv=2.5), isl, osl, rng)
    start = datetime(2024, 5, 10, 0, 0, 0)
    with open(path, "w") as fh:
        fh.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        for t, i, o in zip(req.arrival_s, req.input_tokens, req.output_tokens):
            stamp = (start + timedelta(seconds=float(t))).strftime("%Y-%m-%d %H:%M:%S.%f") + "0"
            fh.write(f"{stamp},{i},{o}\n")


def _burstgpt(path: Path, seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    req = generate(n, ArrivalSpec(process="mmpp", rate_rps=3.0, burst_factor=5.0, burst_fraction=0.1, dwell_s=20),
                   SampledLengthSpec(dist="lognormal", mean=600, cv=1.5, max=16000),
                   SampledLengthSpec(dist="lognormal", mean=280, cv=1.0, max=4000), rng)
    models = rng.choice(["ChatGPT", "GPT-4"], size=n, p=[0.8, 0.2])
    with open(path, "w") as fh:
        fh.write("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n")
        for t, m, i, o in zip(req.arrival_s, models, req.input_tokens, req.output_tokens):
            fh.write(f"{t:.3f},{m},{i},{o},{i + o},Conversation log\n")


def _agents(path: Path, seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    req = generate(n, ArrivalSpec(rate_rps=0.5), SampledLengthSpec(dist="lognormal", mean=3000, cv=0.5),
                   SampledLengthSpec(dist="lognormal", mean=300, cv=1.0, max=4000), rng,
                   SessionSpec(turns_mean=6, think_time_s=8.0, shared_prefix_tokens=4000,
                               new_tokens=SampledLengthSpec(dist="lognormal", mean=400, cv=1.0)))
    with open(path, "w") as fh:
        for t, i, o, k in zip(req.arrival_s, req.input_tokens, req.output_tokens, req.prefix_key):
            fh.write(json.dumps({"arrival_s": round(float(t), 4), "input_tokens": int(i), "output_tokens": int(o),
                                 "session_id": f"s{int(k)}"}) + "\n")


def write_samples(out: Path = OUT) -> list[Path]:
    """Write every sample trace into ``out``; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "azure_code_sample.csv", out / "azure_conv_sample.csv", out / "burstgpt_sample.csv",
             out / "agent_sessions_sample.jsonl"]
    _azure(paths[0], 1, 2000, 4.0, SampledLengthSpec(dist="lognormal", mean=2048, cv=1.2, max=30000),
           SampledLengthSpec(dist="lognormal", mean=28, cv=1.5, max=2000))
    _azure(paths[1], 2, 2000, 4.0, SampledLengthSpec(dist="lognormal", mean=1100, cv=1.0, max=16000),
           SampledLengthSpec(dist="lognormal", mean=230, cv=0.9, max=4000))
    _burstgpt(paths[2], 3, 2000)
    _agents(paths[3], 4, 1000)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    for p in write_samples(ap.parse_args().out):
        print(p)


if __name__ == "__main__":
    main()
