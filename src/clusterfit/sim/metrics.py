"""Metrics from a simulation run: latency percentiles, goodput against SLOs, throughput, queues,
KV utilisation, preemptions, per replica and per time window; CSV writers.

Definitions (seconds unless named otherwise):
    ttft: first output token time - arrival (a retried request counts from its original arrival).
    tpot: (finish - first token) / (output tokens - 1), requests with more than one output token.
    e2e:  finish - arrival.
    goodput: share of *all* requests that completed and met every SLO given (without SLOs: completed).
    window output tokens/s: tokens of completed requests generated in the window, following their replica's
        decode steps (window_output_tokens); a request's answer no longer counts whole in the window it ends.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import counted
from .cluster import SimRun, nice_window
from .ledger import COMPLETED, FAILED, REJECTED

PERCENTILES = (50, 90, 99)


def percentiles(x: np.ndarray) -> dict[str, float | None]:
    """p50/p90/p99 and mean of ``x`` (None when empty)."""
    x = x[np.isfinite(x)]
    if x.size == 0:
        return dict.fromkeys((*(f"p{p}" for p in PERCENTILES), "mean"))
    q = np.percentile(x, PERCENTILES)
    out: dict[str, float | None] = {f"p{p}": float(v) for p, v in zip(PERCENTILES, q)}
    out["mean"] = float(x.mean())
    return out


def latencies(req: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """TTFT, TPOT and end-to-end latency per request, seconds (nan where undefined)."""
    done = req["status"] == COMPLETED
    ttft = np.where(done, req["first_token_s"] - req["arrival_s"], np.nan)
    e2e = np.where(done, req["finish_s"] - req["arrival_s"], np.nan)
    n_out = req["output_tokens"]
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(done & (n_out > 1), (req["finish_s"] - req["first_token_s"]) / (n_out - 1), np.nan)
    return ttft, tpot, e2e


def meets_slo(ttft: np.ndarray, tpot: np.ndarray, status: np.ndarray, slo_ttft_s: float | None,
              slo_tpot_s: float | None) -> np.ndarray:
    """Boolean per request: completed and within every SLO given (TPOT of 1-token answers passes)."""
    ok = status == COMPLETED
    if slo_ttft_s is not None:
        ok &= ttft <= slo_ttft_s
    if slo_tpot_s is not None:
        ok &= ~(tpot > slo_tpot_s)
    return ok


def summarize(run: SimRun, slo_ttft_s: float | None = None, slo_tpot_s: float | None = None,
              ttft_percentile: float = 90.0, tpot_percentile: float = 90.0, min_goodput: float = 0.9) -> dict[str, Any]:
    """The report of a run as one JSON-ready dict (the shape `clusterfit simulate --json` prints).

    ``holds_slo`` (None without SLOs): the TTFT at ``ttft_percentile`` and the TPOT at ``tpot_percentile`` of the
    completed requests are within the SLOs given, at least ``min_goodput`` of all requests met both, and no
    request was rejected or failed. ``verdict`` says what was judged, with the figures.
    """
    req = run.requests
    status = req["status"]
    n = int(status.size)
    ttft, tpot, e2e = latencies(req)
    good = meets_slo(ttft, tpot, status, slo_ttft_s, slo_tpot_s)
    done = status == COMPLETED
    t0 = float(req["arrival_s"][0])
    duration = max(run.end_s - t0, 1e-12)
    out_tokens = float(req["output_tokens"][done].sum())
    in_tokens = float(req["input_tokens"][done].sum())
    samples = run.samples
    waiting = np.array([s.waiting for s in samples], float)
    kv = np.array([s.kv_utilisation for s in samples], float)
    verdict = slo_verdict(ttft, tpot, status, float(good.sum() / n), slo_ttft_s, slo_tpot_s, ttft_percentile,
                          tpot_percentile, min_goodput)
    return {
        "requests": n,
        "completed": int(done.sum()),
        "rejected": int((status == REJECTED).sum()),
        "rejected_too_long": int(run.extra.get("rejected_too_long", 0)),
        "kv_admit_tokens": float(run.extra["kv_admit_tokens"]) if "kv_admit_tokens" in run.extra else None,
        "failed": int((status == FAILED).sum()),
        "retried": int((req["retries"] > 0).sum()),
        "preemptions": int(req["preemptions"].sum()),
        "ttft_s": percentiles(ttft),
        "tpot_s": percentiles(tpot),
        "itl_s": run.token_gaps.summary(PERCENTILES),
        "e2e_s": percentiles(e2e),
        "goodput": float(good.sum() / n),
        "goodput_rps": float(good.sum() / duration),
        "slo": {"ttft_s": slo_ttft_s, "tpot_s": slo_tpot_s, "ttft_percentile": ttft_percentile,
                "tpot_percentile": tpot_percentile, "min_goodput": min_goodput},
        "holds_slo": None if verdict is None else verdict["holds"],
        "verdict": None if verdict is None else {k: v for k, v in verdict.items() if k != "holds"},
        "throughput": {
            "requests_per_s": float(done.sum() / duration),
            "output_tokens_per_s": out_tokens / duration,
            "input_tokens_per_s": in_tokens / duration,
        },
        "duration_s": duration,
        "queue": {"mean_waiting": _mean(waiting), "max_waiting": float(waiting.max()) if waiting.size else 0.0},
        "kv_utilisation": {"mean": _mean(kv), "max": float(kv.max()) if kv.size else 0.0},
        "replicas": run.config.replicas,
        "gpus_per_replica": run.gpus_per_replica,
        "gpu_hours": run.replica_seconds * run.gpus_per_replica / 3600.0,
        "policy": run.config.policy,
        "seed": run.config.seed,
        "per_replica": per_replica(run, ttft, duration),
        "windows": windows(run, ttft, e2e, good),
        "events": run.events,
        "not_exercised": run.not_exercised,
        "closed_loop": run.extra.get("closed_loop"),
        "sim_wall_s": run.sim_wall_s,
    }


def closed_loop_words(clients: int, ramp_s: float) -> str:
    """A closed loop in words: its clients, how they start, how they send (simulate's view, bench --compare)."""
    return (f"{counted(clients, 'client')} "
            + (f"starting over the first {ramp_s:,.1f} s" if ramp_s and clients > 1 else "starting at once")
            + ", each sending its next request when its last one ends")


#: Requests per client below which a closed loop's run is mostly its start: the first requests spread over the ramp,
#: and each client's first cycle.
STEADY_REQUESTS_PER_CLIENT = 3


def short_loop_note(report: dict[str, Any], flag: str = "--requests") -> str | None:
    """Why a closed loop's figures are not those of the loop asked for: fewer clients run than were asked for (one
    per session, or per request without one), or the clients send too few requests each for the run to be more
    than their start; None otherwise. ``flag``: the option that sets the requests simulated."""
    loop = report.get("closed_loop")
    if loop is None:
        return None
    n, clients, asked = report["requests"], loop["clients"], loop["clients_asked"]
    parts = []
    if clients < asked:
        parts.append(f"{clients:,} of the {asked:,} clients run, one per "
                     + (f"session: the {n:,} requests make {loop['sessions']:,} sessions"
                        if loop["session_think_time_s"] is not None else f"request: there are {n:,} requests"))
    if n < STEADY_REQUESTS_PER_CLIENT * clients:
        start = (f"their first requests spread over {loop['ramp_s']:,.1f} s" if loop["ramp_s"] and clients > 1
                 else "all starting at once")   # one client starts at 0 whatever the ramp (ClosedLoop.start)
        parts.append(f"{counted(n, 'request')} over {counted(clients, 'client')} is {n / clients:.2g} each: the run "
                     f"is mostly the clients' start ({start}), not the loop's steady state")
    if not parts:
        return None
    return "; ".join(parts) + f"; give more requests ({flag}; at least {STEADY_REQUESTS_PER_CLIENT} per client)"


def _at(x: np.ndarray, pct: float) -> float | None:
    """The ``pct`` percentile of the finite values of ``x`` (None: none)."""
    x = x[np.isfinite(x)]
    return float(np.percentile(x, pct)) if x.size else None


def slo_verdict(ttft: np.ndarray, tpot: np.ndarray, status: np.ndarray, goodput: float, slo_ttft_s: float | None,
                slo_tpot_s: float | None, ttft_pct: float = 90.0, tpot_pct: float = 90.0,
                min_goodput: float = 0.9) -> dict[str, Any] | None:
    """The SLO verdict (None without SLOs): TTFT at ``ttft_pct`` and TPOT at ``tpot_pct`` of the completed
    requests within their targets, goodput >= ``min_goodput``, every request completed; ``holds`` is the verdict,
    ``text`` the line that says it ("TTFT p90 412 ms <= 1500; TPOT p90 37.1 ms <= 40; goodput 0.97 >= 0.9")."""
    if slo_ttft_s is None and slo_tpot_s is None:
        return None
    all_done = bool(np.all(status == COMPLETED))
    t_at, p_at = _at(ttft, ttft_pct), _at(tpot, tpot_pct)
    ttft_ok = None if slo_ttft_s is None else (t_at is not None and t_at <= slo_ttft_s)
    tpot_ok = None if slo_tpot_s is None else (p_at is None or p_at <= slo_tpot_s)
    good_ok = goodput >= min_goodput - 1e-12
    parts = []
    if slo_ttft_s is not None:
        parts.append(f"TTFT p{ttft_pct:g} {_ms(t_at)} {'<=' if ttft_ok else '>'} {slo_ttft_s * 1e3:g}")
    if slo_tpot_s is not None:
        parts.append(f"TPOT p{tpot_pct:g} {_ms(p_at, 1)} {'<=' if tpot_ok else '>'} {slo_tpot_s * 1e3:g}")
    parts.append(f"goodput {goodput:.3f} {'>=' if good_ok else '<'} {min_goodput:g}")
    if not all_done:
        parts.append(f"{int(np.sum(status != COMPLETED))} requests not completed")
    holds = all_done and ttft_ok is not False and tpot_ok is not False and good_ok
    return {"ttft_percentile": ttft_pct, "ttft_s": t_at, "ttft_target_s": slo_ttft_s, "ttft_ok": ttft_ok,
            "tpot_percentile": tpot_pct, "tpot_s": p_at, "tpot_target_s": slo_tpot_s, "tpot_ok": tpot_ok,
            "goodput": goodput, "min_goodput": min_goodput, "goodput_ok": good_ok, "all_completed": all_done,
            "text": "; ".join(parts), "holds": bool(holds)}


def _ms(x: float | None, digits: int = 0) -> str:
    return "-" if x is None else f"{x * 1e3:.{digits}f} ms"


def _mean(x: np.ndarray) -> float:
    return float(x.mean()) if x.size else 0.0


def per_replica(run: SimRun, ttft: np.ndarray, duration_s: float) -> list[dict[str, Any]]:
    """Completed requests, preemptions, busy share and TTFT p50/p99 per replica."""
    rep_of = run.requests["replica"]
    out = []
    for r in run.replicas:
        mine = ttft[rep_of == r["replica"]]
        p = percentiles(mine)
        out.append({**r, "utilisation": r["busy_s"] / duration_s, "ttft_p50_s": p["p50"], "ttft_p99_s": p["p99"]})
    return out


def windows(run: SimRun, ttft: np.ndarray, e2e: np.ndarray, good: np.ndarray) -> list[dict[str, Any]]:
    """Per time window (``run.extra['window_s']``): arrivals, completions and failures in it; output tokens/s
    generated in it by the requests that completed (window_output_tokens); TTFT / e2e percentiles and goodput of
    the requests arriving in it; and sampled queue, KV and live replicas."""
    req = run.requests
    w = float(run.extra["window_s"])
    arr = req["arrival_s"]
    t0 = float(arr[0])
    if (run.end_s - t0) / w > 2000:  # the run outlasted its arrivals by far: coarser windows
        w = nice_window(run.end_s - t0)
    n_win = max(1, int(math.ceil((run.end_s - t0) / w + 1e-9)))
    edges = t0 + w * np.arange(n_win + 1)
    a_idx = np.searchsorted(arr, edges)
    fin = req["finish_s"]
    status = req["status"]
    done = status == COMPLETED
    completed = np.histogram(fin[done], edges)[0]
    out_tokens = window_output_tokens(run, edges)
    failed = np.histogram(fin[status == FAILED], edges)[0]
    st = np.array([s.t_s for s in run.samples])
    s_idx = np.searchsorted(st, edges)
    out = []
    for k in range(n_win):
        lo, hi = a_idx[k], a_idx[k + 1]
        tt = percentiles(ttft[lo:hi])
        ee = percentiles(e2e[lo:hi])
        ss = run.samples[s_idx[k]:s_idx[k + 1]]
        out.append({
            "t_s": float(edges[k]),
            "arrivals": int(hi - lo),
            "completed": int(completed[k]),
            "output_tokens_per_s": float(out_tokens[k] / w),
            "failed": int(failed[k]),
            "ttft_p50_s": tt["p50"], "ttft_p99_s": tt["p99"], "e2e_p99_s": ee["p99"],
            "goodput": float(good[lo:hi].mean()) if hi > lo else None,
            "waiting": float(np.mean([s.waiting for s in ss])) if ss else None,
            "kv_utilisation": float(np.mean([s.kv_utilisation for s in ss])) if ss else None,
            "live_replicas": int(min(s.live_replicas for s in ss)) if ss else None,
        })
    return out


def window_output_tokens(run: SimRun, edges: np.ndarray) -> np.ndarray:
    """Output tokens of the completed requests generated in each window between consecutive ``edges`` (seconds):
    each request's first token at its first-token time, the other ``output - 1`` from then to its finish, spread
    as its replica's decode batch advanced (``run.decode_progress``: every sequence of a batch gains a token per
    step, so a request's tokens follow its replica's progress; in a stretch of slow steps it emits fewer tokens a
    second). Without the progress (disaggregated runs) they are spread evenly in time. Tokens of requests that
    failed or were cut off by a failure are not counted. Sums to the completed requests' output tokens when the
    windows cover every finish."""
    req = run.requests
    done = req["status"] == COMPLETED
    first, fin, tokens = req["first_token_s"][done], req["finish_s"][done], req["output_tokens"][done]
    t0 = float(edges[0])
    progress = run.decode_progress
    if progress is None or progress.t_s.size == 0:
        return output_tokens_per_window(first - t0, fin - t0, tokens, edges - t0)
    rep = req["replica"][done]
    out = np.zeros(edges.size - 1)
    t_s = progress.t_s + progress.shift_s
    # each replica's requests as one slice of a sort by replica (a mask per replica compared every request with
    # every replica: replicas x requests)
    if rep.size == 0:
        return out
    order = np.argsort(rep, kind="stable")
    reps, starts = np.unique(rep[order], return_index=True)
    for r, mine in zip(reps.tolist(), np.split(order, starts[1:]), strict=True):
        curve = progress.tokens[:, r]

        def clock(x: np.ndarray, curve: np.ndarray = curve) -> np.ndarray:
            return np.interp(x, t_s, curve)

        out += output_tokens_per_window(first[mine], fin[mine], tokens[mine], edges, clock)
    return out


def output_tokens_per_window(first_s: np.ndarray, finish_s: np.ndarray, tokens: np.ndarray, edges: np.ndarray,
                             clock: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """Output tokens generated in each window between consecutive ``edges`` (seconds) by requests whose first token
    came at ``first_s`` and last at ``finish_s``: the first at ``first_s``, the other ``tokens - 1`` spread evenly
    over (``first_s``, ``finish_s``] on the scale of ``clock`` (a non-decreasing map of times; default: time
    itself), so a request emits in proportion to how far ``clock`` moves. A request over which ``clock`` does not
    move has them all at its finish. O(n log n): the ramps are summed through sorted cumulative sums."""
    first = np.asarray(first_s, float)
    fin = np.asarray(finish_s, float)
    rest = np.asarray(tokens, float) - 1.0
    points = np.histogram(first, edges)[0].astype(float)   # each request's first token
    c_first, c_fin, c_edges = (first, fin, edges) if clock is None else \
        (clock(first), clock(fin), clock(np.asarray(edges, float)))
    span = c_fin - c_first
    ramp = span > 1e-12 * np.maximum(np.abs(c_fin), 1.0)
    still = ~ramp & (rest > 0)
    if np.any(still):  # no decode span to spread over: the rest at the finish
        points += np.histogram(fin[still], edges, weights=rest[still])[0]
    slope = rest[ramp] / span[ramp]   # tokens per unit of the clock over the decode span
    return points + np.diff(_ramp_total(c_first[ramp], slope, c_edges) - _ramp_total(c_fin[ramp], slope, c_edges))


def _ramp_total(start: np.ndarray, slope: np.ndarray, x: np.ndarray) -> np.ndarray:
    """sum_i slope_i * max(0, x - start_i) at every ``x``."""
    order = np.argsort(start, kind="stable")
    s = start[order]
    k = slope[order]
    cum_k = np.concatenate([[0.0], np.cumsum(k)])
    cum_ks = np.concatenate([[0.0], np.cumsum(k * s)])
    idx = np.searchsorted(s, x, side="right")
    return x * cum_k[idx] - cum_ks[idx]


def write_windows_csv(report: dict[str, Any], path: str | Path) -> None:
    """The per-window time series of ``report`` as CSV (one row per window)."""
    rows = report["windows"]
    with open(path, "w", newline="") as fh:
        wr = csv.DictWriter(fh, fieldnames=list(rows[0]) if rows else ["t_s"])
        wr.writeheader()
        wr.writerows(rows)


def write_requests_csv(run: SimRun, path: str | Path) -> None:
    """One row per request: arrival, lengths, first token, finish, status, replica, retries, preemptions."""
    req = run.requests
    names = {COMPLETED: "completed", REJECTED: "rejected", FAILED: "failed"}
    ttft, tpot, e2e = latencies(req)
    with open(path, "w", newline="") as fh:
        wr = csv.writer(fh)
        wr.writerow(["arrival_s", "input_tokens", "output_tokens", "status", "replica", "ttft_s", "tpot_s",
                     "e2e_s", "retries", "preemptions"])
        for i in range(req["status"].size):
            wr.writerow([f"{req['arrival_s'][i]:.6f}", int(req["input_tokens"][i]), int(req["output_tokens"][i]),
                         names.get(int(req["status"][i]), "pending"), int(req["replica"][i]),
                         _fmt(ttft[i]), _fmt(tpot[i]), _fmt(e2e[i]), int(req["retries"][i]),
                         int(req["preemptions"][i])])


def _fmt(x: float) -> str:
    return "" if not np.isfinite(x) else f"{x:.6f}"
