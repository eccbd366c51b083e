"""The twin under a real client: `clusterfit bench` against `clusterfit twin`, each in its own process on loopback.

    python benchmarks/twin_loop.py [--skip-streams] [--no-write]

1. Issue 15's check: `clusterfit twin meta-llama/Llama-3.1-8B --system h200 --replicas 2` and
   `clusterfit bench URL --rate 4 --requests 200 --isl 512 --osl 128 --json`: every request completes, and bench's
   mean TPOT is within 15% of `clusterfit simulate` for the same load (same command-line options).
2. Many concurrent streams on one core: a closed loop of 500 streams (`bench --concurrency 500`, 256-token prompts,
   256-token answers) against a one-replica twin: bench's TPOT beside the twin's own simulated TPOT for the requests
   it served, the token delivery lag (clusterfit_twin_token_delivery_lag_seconds) and the twin's CPU seconds per
   wall second.

Writes benchmarks/results/twin_loop.json. The figures depend on the host's load: they are what this run saw.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

RESULTS = Path(__file__).parent / "results" / "twin_loop.json"
MODEL = "meta-llama/Llama-3.1-8B"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cli(*args: str, timeout: float = 900) -> dict:
    out = subprocess.run([sys.executable, "-m", "clusterfit.cli", *args, "--json"], capture_output=True, text=True,
                         timeout=timeout, check=True)
    return json.loads(out.stdout)


class Twin:
    """`clusterfit twin ...` in a subprocess on a free loopback port."""

    def __init__(self, *args: str) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "clusterfit.cli", "twin", MODEL, "--system", "h200",
                                      "--port", str(self.port), *args], stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(self.url + "/health", trust_env=False).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the twin did not start: {self.proc.stderr.read() if self.proc.stderr else ''}")
            time.sleep(0.1)

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    def get(self, path: str, **params: object) -> httpx.Response:
        return httpx.get(self.url + path, params=params, timeout=60, trust_env=False)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=30)


def issue_check() -> dict:
    twin = Twin("--replicas", "2")
    try:
        bench = _cli("bench", twin.url, "--model", MODEL, "--rate", "4", "--requests", "200", "--isl", "512",
                     "--osl", "128")
    finally:
        twin.stop()
    sim = _cli("simulate", MODEL, "--system", "h200", "--replicas", "2", "--rate", "4", "--requests", "200",
               "--isl", "512", "--osl", "128")
    return {"command": "clusterfit bench URL --model meta-llama/Llama-3.1-8B --rate 4 --requests 200 --isl 512 "
                       "--osl 128 --json (twin: --system h200 --replicas 2)",
            "completed": bench["completed"], "failed": bench["failed"],
            "bench_tpot_mean_ms": bench["tpot_s"]["mean"] * 1e3, "simulate_tpot_mean_ms": sim["tpot_s"]["mean"] * 1e3,
            "tpot_ratio": bench["tpot_s"]["mean"] / sim["tpot_s"]["mean"],
            "bench_ttft_mean_ms": bench["ttft_s"]["mean"] * 1e3, "simulate_ttft_mean_ms": sim["ttft_s"]["mean"] * 1e3,
            "bench_output_tokens_per_s": bench["throughput"]["output_tokens_per_s"],
            "simulate_output_tokens_per_s": sim["throughput"]["output_tokens_per_s"]}


def many_streams(concurrency: int = 500, requests: int = 1500) -> dict:
    twin = Twin("--history", str(requests + 10))
    try:
        cpu0, wall0 = twin.cpu_s(), time.monotonic()
        bench = _cli("bench", twin.url, "--model", MODEL, "--concurrency", str(concurrency), "--requests",
                     str(requests), "--isl", "256", "--osl", "256")
        cpu, wall = twin.cpu_s() - cpu0, time.monotonic() - wall0
        recs = [r for r in twin.get("/twin/requests").json()["requests"] if r["max_tokens"] == 256]
        metrics = twin.get("/metrics").text
    finally:
        twin.stop()
    tpot = np.mean([(r["finish_s"] - r["first_token_s"]) / 255 for r in recs])
    from prometheus_client.parser import text_string_to_metric_families

    lag = {s.name.rsplit("_", 1)[1] + s.labels.get("le", ""): s.value
           for f in text_string_to_metric_families(metrics) if f.name == "clusterfit_twin_token_delivery_lag_seconds"
           for s in f.samples}
    count = lag.get("count", 0.0)
    return {"concurrency": concurrency, "requests": requests, "completed": bench["completed"],
            "failed": bench["failed"], "peak_concurrency": bench["peak_concurrency"],
            "bench_tpot_mean_ms": bench["tpot_s"]["mean"] * 1e3, "twin_simulated_tpot_mean_ms": float(tpot) * 1e3,
            "bench_itl_p99_ms": bench["itl_s"]["p99"] * 1e3,
            "output_tokens_per_s": bench["throughput"]["output_tokens_per_s"],
            "delivery_lag_mean_ms": 1e3 * lag.get("sum", 0.0) / max(count, 1.0),
            "delivery_lag_share_within_5ms": lag.get("bucket0.005", 0.0) / max(count, 1.0),
            "twin_cpu_s_per_wall_s": cpu / wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-streams", action="store_true", help="only the issue's check")
    ap.add_argument("--no-write", action="store_true", help=f"do not write {RESULTS}")
    args = ap.parse_args()
    out: dict = {"host": {"python": platform.python_version(), "cpus": os.cpu_count(),
                          "load_average_1m": os.getloadavg()[0]},
                 "issue_check": issue_check()}
    if not args.skip_streams:
        out["many_streams"] = many_streams()
    print(json.dumps(out, indent=2))
    if not args.no_write:
        RESULTS.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
