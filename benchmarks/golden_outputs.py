"""Capture the `--json` output of the README's example commands, to check a refactor changes no figure.

    python benchmarks/golden_outputs.py OUT_DIR          # writes one JSON file per command
    python benchmarks/golden_outputs.py OUT_DIR --compare BEFORE_DIR

Timing fields (``sim_wall_s``) are dropped before comparing; everything else must be identical.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

COMMANDS = {
    "fit_glm53": "fit zai-org/GLM-5.3 --precision fp8",
    "fit_ds3_nodes": "fit deepseek-v3 --system h100 --system b200 --context 131072 --engine trtllm",
    "model_glm53": "model zai-org/GLM-5.3",
    "perf_70b_trt": "perf meta-llama/Llama-3.1-70B --system h200 --tp 4 --isl 1024 --osl 1024 --max-throughput "
                    "--engine trtllm",
    "perf_ds3": "perf deepseek-ai/DeepSeek-V3 --system h200 --tp 8 --ep 8 --isl 2048 --osl 512 --concurrency 64",
    "perf_8b_batch": "perf llama-3.1-8b --system h200 --tp 1 --batch 32 --context 4096 --isl 4000 --osl 200",
    "perf_70b_h100_fp8": "perf llama-3.1-70b --system h100 --tp 2 --precision fp8 --isl 2048 --osl 2048 "
                         "--max-throughput --engine trtllm",
    "plan_glm53": "plan zai-org/GLM-5.3 --precision fp8 --isl 4000 --osl 500 --rate 5 --ttft-ms 2000 --tpot-ms 50 "
                  "--system h200 --system b200 --system h100 --failover 1 --endpoint-price in=0.6,out=2.2",
    "plan_scenario_glm53": "plan --scenario examples/glm53-fp8-h200-b200-h100.yaml",
    "plan_scenario_chat": "plan --scenario examples/chat-lognormal.yaml --verify --verify-requests 3000",
    "plan_scenario_agent": "plan --scenario examples/agent-sessions.yaml",
    "plan_scenario_hist": "plan --scenario examples/batch-histogram.toml",
    "plan_ds3_all": "plan deepseek-ai/DeepSeek-V3 --isl 4096 --osl 1024 --rate 5 --ttft-ms 2000 --tpot-ms 50",
    "sim_8b": "simulate meta-llama/Llama-3.1-8B --system hgx_h200 --isl 1000 --osl 250 --length-cv 1 --rate 160 "
              "--replicas 8 --requests 8000 --fail-at 20 --ttft-ms 500 --tpot-ms 30",
    "sim_trace": "simulate Qwen/Qwen3-30B-A3B --system hgx_h200 "
                 "--trace src/clusterfit/sim/traces/azure_conv_sample.csv --replicas 2",
    "sim_scenario_chat": "simulate --scenario examples/chat-lognormal.yaml --system hgx_h200 --requests 3000",
}
VOLATILE = {"sim_wall_s", "plot"}


def _strip(obj):
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in VOLATILE}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def capture(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, args in COMMANDS.items():
        proc = subprocess.run([sys.executable, "-c", "from clusterfit.cli import main; main()", *args.split(), "--json"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            (out / f"{name}.err").write_text(proc.stderr)
            print(f"{name}: exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
            continue
        (out / f"{name}.json").write_text(json.dumps(_strip(json.loads(proc.stdout)), indent=1, sort_keys=True))
        print(f"{name}: ok")


def compare(out: Path, before: Path) -> int:
    bad = 0
    for name in COMMANDS:
        a, b = before / f"{name}.json", out / f"{name}.json"
        if not a.exists() or not b.exists():
            print(f"{name}: missing ({a.exists()=}, {b.exists()=})")
            bad += 1
        elif a.read_text() != b.read_text():
            print(f"{name}: DIFFERS")
            bad += 1
        else:
            print(f"{name}: identical")
    return bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--compare", type=Path, default=None)
    a = ap.parse_args()
    capture(a.out)
    if a.compare is not None:
        sys.exit(1 if compare(a.out, a.compare) else 0)


if __name__ == "__main__":
    main()
