"""Benchmark a live OpenAI-compatible endpoint (``clusterfit bench``) with the simulator's workloads, measured with
the definitions of ``vllm bench serve``, optionally beside clusterfit's prediction for the same load.

    from clusterfit.bench import run_bench
    result = run_bench(url="http://127.0.0.1:8000", model="meta-llama/Llama-3.1-8B", rate=4, requests=200,
                       isl=512, osl=128)                                   # -> BenchResult
    result.ttft_s.mean, result.tpot_s.p90, result.throughput.output_tokens_per_s, result.failures
    result.records          # one RequestRecord per request (ttft_s, e2e_s, itl_s, output_tokens, error, ...)

``run_bench(BenchConfig(...))`` takes the whole configuration as one model; ``run_sweep(config, "rate", [1, 2, 4])``
runs several loads one after another; ``bench_async`` is the coroutine for callers inside an event loop.
"""

from .config import BenchConfig, parse_config
from .result import BenchResult, BenchSweep, RequestRecord, write_requests_csv
from .runner import BenchProgress, bench_async, run_bench, run_sweep

__all__ = ["BenchConfig", "BenchProgress", "BenchResult", "BenchSweep", "RequestRecord", "bench_async",
           "parse_config", "run_bench", "run_sweep", "write_requests_csv"]
