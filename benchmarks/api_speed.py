"""Latency of the HTTP API (`clusterfit serve`) as a client on loopback sees it, one request at a time.

    python benchmarks/api_speed.py [--repeat N] [--out FILE]
        -> prints the medians, writes benchmarks/results/api_speed.json

The server is the tests' own (tests/_webserver.py: uvicorn on a free 127.0.0.1 port, in a thread of this process).
Each request is sent once (``first_call_s``: the first loads the model and hardware catalogs, and each pays for the
model it is first to load), then ``--repeat`` times (``wall_s_median``, ``wall_s_runs``); all in seconds.
The requests are the web tests' GLM-5.3 fit over three systems, a perf of Llama-3.1-8B on one H200 at concurrency
32, and the plan of ``benchmarks/plan_speed.py`` (DeepSeek-V3 over every system).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _webserver import running_server  # noqa: E402

REQUESTS: dict[str, tuple[str, dict]] = {
    "fit_glm_5_3_fp8_three_systems": (
        "/api/fit", {"model": "zai-org/GLM-5.3", "precision": "fp8", "systems": ["h100", "h200", "b200"]}),
    "perf_llama_3_1_8b_h200": (
        "/api/perf", {"model": "meta-llama/Llama-3.1-8B-Instruct", "system": "h200", "isl": 1024, "osl": 1024,
                                  "concurrency": 32}),
    "plan_deepseek_v3_all_systems": (
        "/api/plan", {"model": "deepseek-ai/DeepSeek-V3", "isl": 4096, "osl": 1024, "rate": 5, "ttft_ms": 2000,
                      "tpot_ms": 50}),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7, help="timed requests per endpoint (default 7)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "api_speed.json")
    args = ap.parse_args()
    out: dict[str, dict] = {}
    with running_server() as url, httpx.Client(base_url=url, timeout=120, trust_env=False) as client:
        for name, (path, body) in REQUESTS.items():
            t0 = time.perf_counter()
            first = client.post(path, json=body)
            first_s = time.perf_counter() - t0
            if first.status_code != 200:
                raise SystemExit(f"error: {path} answered {first.status_code}: {first.text[:300]}")
            runs = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                client.post(path, json=body).raise_for_status()
                runs.append(time.perf_counter() - t0)
            out[name] = {"path": path, "body": body, "first_call_s": first_s, "wall_s_median": statistics.median(runs),
                         "wall_s_runs": runs}
            print(f"{name}: first {first_s * 1e3:.1f} ms, then median {statistics.median(runs) * 1e3:.1f} ms over "
                  f"{args.repeat}")
    args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
