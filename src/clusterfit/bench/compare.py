"""clusterfit's prediction for the load a benchmark run sent, beside what it measured.

``clusterfit.api.simulate`` replays the run's own requests as a trace, with the prompt tokens the server counted
(``usage.prompt_tokens``; else the length asked for) and the output tokens it generated (else ``max_tokens`` for a
request that failed); the simulator's percentiles sit beside the measured ones.
- Open loop (``rate``, ``trace``): each request at the time it was sent. Same arrivals, same lengths.
- Closed loop (``concurrency``): the requests in the order they were sent, from a closed loop of that many clients
  (at most the requests sent) that start at once and send the next request as one ends, as the benchmark's client
  does (sim.clients, ``ramp_s`` 0).

ratio = measured / predicted: above 1 the endpoint is slower (latency) or faster (throughput) than predicted.
"""

from __future__ import annotations

import csv
import tempfile
from pathlib import Path
from typing import Any

from ..errors import counted
from ..schema import Percentiles
from ..sim.metrics import closed_loop_words
from .config import BenchConfig
from .result import BenchResult, ComparedMetric, Comparison, RequestRecord


def _ratio(measured: float | None, predicted: float | None) -> float | None:
    if measured is None or predicted is None or predicted == 0:
        return None
    return measured / predicted


def _row(metric: str, unit: str, measured: float | None, predicted: float | None) -> ComparedMetric:
    return ComparedMetric(metric=metric, unit=unit, measured=measured, predicted=predicted,
                          ratio=_ratio(measured, predicted))


def _prediction_options(cfg: BenchConfig) -> dict[str, Any]:
    """The layout, precision, engine and catalog options the user gave, as API keyword arguments."""
    names = ("gpus", "tp", "pp", "ep", "dp", "precision", "kv_dtype", "engine", "max_num_seqs",
             "max_num_batched_tokens", "gpu_memory_utilization", "enforce_eager")
    out = {n: getattr(cfg, n) for n in names if getattr(cfg, n) is not None}
    if cfg.catalog:
        out["catalog"] = list(cfg.catalog)
    return out


def _layout_text(cfg: BenchConfig, gpus: int) -> str:
    given = [f"{k.upper()}{getattr(cfg, k)}" for k in ("tp", "pp", "ep", "dp") if getattr(cfg, k) is not None]
    return f"{gpus} GPU(s) per replica" + (f" ({' '.join(given)})" if given else "")


def check_prediction_options(cfg: BenchConfig) -> None:
    """Refuse --compare's model, system, layout, precision and engine before the benchmark runs (a typo found after a
    ten-minute run, or hidden behind an unreachable URL, is worse): they must give a batch-1 step of the model."""
    from .. import api

    api.perf(model=cfg.compare, system=cfg.system, isl=16, osl=2, batch=1, **_prediction_options(cfg))


def compare(cfg: BenchConfig, result: BenchResult, served: tuple[str, str | None] | None = None) -> Comparison:
    """The prediction for ``result``'s load: the simulator's replay of the requests sent (module docstring).
    ``served``: the endpoint's model id and root (GET /v1/models; None: not known); one that does not look like the
    compared model is noted first."""
    out = _simulate(cfg, result)
    mismatch = _other_model(cfg, served)
    if mismatch:
        out.notes.insert(0, mismatch)
    return out


def _name_key(name: str) -> str:
    """A model name as compared: its last path part (an HF id's name, a checkpoint folder), lower case."""
    return name.strip().rstrip("/").rsplit("/", 1)[-1].lower()


def _other_model(cfg: BenchConfig, served: tuple[str, str | None] | None) -> str | None:
    """A note when the endpoint's model (its id and root) is not the compared model: the prediction is then for
    another model than the one measured. A served name matches when it names the compared model (its last path part,
    any case) or resolves to the same bundled architecture (arch.resolve_model_id: -Instruct, -FP8, date suffixes and
    aliases; never -Air or a newer version, which a substring test took for the base model: DeepSeek-V3.2 served
    against --compare deepseek-ai/DeepSeek-V3 said nothing)."""
    if served is None or cfg.compare is None:
        return None
    from ..arch import load_model, resolve_model_id

    model = load_model(cfg.compare)
    keys = {_name_key(n) for n in (cfg.compare, model.hf_id or "", model.name) if n.strip()}
    for name in (n for n in served if n):
        if _name_key(name) in keys or (model.hf_id is not None and resolve_model_id(name) == model.hf_id):
            return None
    said = " ".join(f"{what} {n!r}" for what, n in zip(("id", "root"), served) if n)
    return (f"the endpoint serves {said} (GET /v1/models), which does not look like {cfg.compare}"
            + (f" ({model.hf_id})" if model.hf_id and model.hf_id != cfg.compare else "")
            + ": the prediction is for that model, not necessarily for the one measured")


def _replay_rows(records: list[RequestRecord]) -> list[tuple[float, int, int]]:
    """(send time s, prompt tokens, output tokens) of each request sent, as the server saw them, in send order."""
    return sorted((r.sent_s, r.counted_input_tokens if r.ok else r.input_tokens,
                   r.output_tokens if r.ok and r.output_tokens >= 1 else r.max_tokens) for r in records)


def _simulate(cfg: BenchConfig, result: BenchResult) -> Comparison:
    from .. import api

    rows = _replay_rows(result.records)
    with tempfile.TemporaryDirectory(prefix="clusterfit-bench-") as folder:
        trace = Path(folder) / "sent.csv"
        with open(trace, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(("arrival_s", "input_tokens", "output_tokens"))
            w.writerows((f"{t:.6f}", i, o) for t, i, o in rows)
        # a closed loop runs as many clients as requests were sent at most (sim.clients.ClosedLoop)
        loop = ({"concurrency": cfg.concurrency, "ramp_s": 0.0}
                if cfg.kind == "concurrency" and cfg.concurrency is not None else {})
        sim = api.simulate(model=cfg.compare, system=cfg.system, trace=str(trace), requests=len(rows),
                           seed=cfg.seed, **loop, **{k: v for k, v in (("replicas", cfg.replicas),
                                                                      ("policy", cfg.policy), ("ttft_ms", cfg.ttft_ms),
                                                                      ("tpot_ms", cfg.tpot_ms)) if v is not None},
                           **_prediction_options(cfg))
    out: list[ComparedMetric] = []
    for name, measured, predicted in (("TTFT", result.ttft_s, sim.ttft_s), ("TPOT", result.tpot_s, sim.tpot_s),
                                      ("ITL", result.itl_s, sim.itl_s), ("E2E latency", result.e2e_s, sim.e2e_s)):
        out += _percentile_rows(name, measured, predicted)
    out.append(_row("request throughput", "requests/s", result.throughput.requests_per_s,
                    sim.throughput.requests_per_s))
    out.append(_row("output throughput", "tokens/s", result.throughput.output_tokens_per_s,
                    sim.throughput.output_tokens_per_s))
    if result.goodput is not None:
        out.append(_row("goodput", "share of requests", result.goodput, sim.goodput))
    server_counted = any(r.prompt_tokens is not None for r in result.records if r.ok)
    cl = sim.closed_loop
    how = ("at their send times" if cl is None
           else f"in their order, from a closed loop of {closed_loop_words(cl.clients, cl.ramp_s)}")
    notes = [f"simulate replayed the {len(rows)} requests sent, {how}, with "
             + ("the prompt tokens the server counted" if server_counted else "the prompt lengths asked for (4 characters "
                "per token; the server reported no usage.prompt_tokens)") + " and the output tokens it generated",
             f"simulated: {sim.completed} completed, {sim.rejected} rejected, {sim.failed} failed, "
             f"{sim.preemptions} preemptions; queue mean {sim.queue.mean_waiting:.1f}, KV use mean "
             f"{sim.kv_utilisation.mean:.0%}"]
    if cl is not None and cl.clients < cl.clients_asked:
        notes.insert(1, f"the run sent {counted(len(rows), 'request')}, fewer than --concurrency "
                        f"{cl.clients_asked}: at most {cl.clients} in flight")
    return Comparison(source="simulate", model=sim.model, system=sim.system, replicas=sim.replicas,
                      gpus_per_replica=sim.gpus_per_replica, layout=_layout_text(cfg, sim.gpus_per_replica),
                      rows=out, notes=notes)


def _percentile_rows(name: str, measured: Percentiles, predicted: Percentiles) -> list[ComparedMetric]:
    return [_row(f"{name} {stat}", "s", getattr(measured, stat), getattr(predicted, stat))
            for stat in ("mean", "p50", "p90", "p99")]
