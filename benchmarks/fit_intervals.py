"""Fit the prediction-interval table (src/clusterfit/catalog/intervals.json) from grouped cross-validation residuals,
and report how often the intervals hold measured figures they were not fitted on.

    python benchmarks/fit_intervals.py ../shared/reference/published/measured-dev.csv \\
        ../shared/reference/published/measured-oss2-dev.csv --max-folds 10 --workers 2

Steps (clusterfit.intervals documents the table and how figures use it):
1. For each CSV, benchmarks/accuracy.py's ``grouped_cv`` with the ``table`` grouping (leave one source table out;
   ``--max-folds`` merges tables into that many refits): every row is predicted with the engine constants of the
   calibrated engine (``--engine``, TensorRT-LLM) refitted without its fold. Rows of an engine whose shipped
   constants benchmarks/fit_oss_engines.py fitted on the CSV (vLLM and SGLang today; ``--oss-fit`` names each
   results file) are predicted with the constants of that fit's grouped-CV fold that held their source page out.
   Rows of engines whose constants no row tuned are predicted with the shipped ones, held out by construction.
2. Each predicted row gives a residual in the time direction, r = log(measured time / predicted time) (for a rate
   metric log(predicted / measured)), and a family: engine x GPU family x dense/MoE x regime (row_family).
3. The conformal widening by regime (clusterfit.intervals): each fold's residuals are scored against a table
   fitted on the other folds, and the widening is the finite-sample 80% (90%) quantile of those scores.
4. Nested coverage: the rows of each CV fold (each source table, for rows no refit held out) are checked against a
   table fitted on the residuals of every other fold only, with a widening fitted without that fold too;
   ``interval_coverage`` is the share of rows whose measured value lies inside its 80% interval (and 90%), overall
   and by engine, regime and fallback level.
5. The table fitted on every residual is written to ``--out`` with this command, the date, the model commit (and
   the model files that differed from it) and the coverage; the report also goes to
   benchmarks/results/fit_intervals.json.

Rows left out of the table (counted in the report): online-serving throughput rows at a finite request rate that
the prediction does not saturate (the cluster then serves the offered load, so the row tests the load, not the
model), and rows whose regime cannot be told.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import accuracy as acc  # noqa: E402  (benchmarks/accuracy.py: the harness that predicts the rows)

from clusterfit.intervals import (DEFAULT_CONFIDENCE, INTERVALS_JSON, MIN_RESIDUALS, QUANTILES,  # noqa: E402
                                  Family, IntervalTable, conformal_widening, conformity, decode_regime, fit_table,
                                  hw_family, is_moe, load_table)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "fit_intervals.json"
#: Metrics of a time (ms); every other predicted metric is a rate (tokens/s).
TIME_PREFIXES = ("ttft", "tpot", "itl", "e2e")
#: Metrics of the prefill regime: the time to first token, and prefill throughput.
PREFILL_TIME_METRICS = ("ttft_ms", "ttft_ms_mean", "ttft_ms_p50")
#: Metrics measured at batch 1 (one sequence decoding): the decode regime whatever the load column says.
BATCH1_METRICS = ("tokens_per_s_per_user", "decode_tokens_per_s_batch1")
#: An online row at a finite request rate measures capacity only when the prediction falls short of the offered
#: output tokens/s by more than this share (the cluster saturates); above it the row measures the offered load.
SATURATED = 0.95


def is_time_metric(metric: str) -> bool:
    return metric.startswith(TIME_PREFIXES)


def residual(row, pred: float) -> float:
    """log(measured time / predicted time): for a time metric log(measured / predicted), for a rate the inverse."""
    meas = float(row["value"])
    r = math.log(meas / pred)
    return r if is_time_metric(row["metric"]) else -r


def row_replicas(row) -> int:
    """Replicas the harness predicts the row on (accuracy.layout_for, the row's GPUs over one replica's)."""
    engine = acc.engine_for(row["engine"])
    r = acc.with_command(row, engine)
    (tp, pp, _ep, dp), reps = acc.layout_for(r, r["model"], engine, acc.row_settings(r))
    per = tp * pp * dp
    return max(1, acc._int(row["num_gpus"], per * reps) // per)


def row_batch(row, pred: float) -> float | None:
    """Running sequences per replica the row's load states (None: a max-throughput run, large batch):
    'static batch size N' and closed-loop concurrency N over the replicas; at a finite request rate Q, Little's
    law on the predicted TPOT (Q x OSL x TPOT over the replicas); 'request rate INF': its requests over the
    replicas."""
    mode = row["concurrency_or_mode"].lower()
    reps = row_replicas(row)
    m = re.search(r"static batch size (\d+)", mode)
    if m:
        b = float(m.group(1))
        return b if "out_tps=output_seqlen*batch_size/total_latency/tp" in row["notes"] else b / reps
    qps = acc.online_qps(row)
    if qps is not None and acc.is_simulated(row):
        osl = acc._int(row["osl"], 1)
        if not np.isfinite(qps):
            return acc.online_requests(row) / reps
        if row["metric"].startswith(("tpot", "itl")):
            return qps * osl * pred / 1e3 / reps
        return None
    if acc.all_at_once(mode):
        return None
    st = acc.row_settings(row)
    if st.concurrency is not None:
        return st.concurrency / reps
    return None


def row_regime(row, pred: float) -> str | None:
    """prefill (TTFT, prefill throughput), queued (TTFT of a run whose requests are all sent at once), decode (at
    most DECODE_BATCH_MAX sequences per replica, batch-1 metrics) or throughput; None for an online throughput
    row that measures the offered load."""
    metric = row["metric"]
    if metric in PREFILL_TIME_METRICS:
        return "queued" if acc.all_at_once(row["concurrency_or_mode"].lower()) else "prefill"
    if metric in acc.PREFILL_METRICS:
        return "prefill"
    if metric in BATCH1_METRICS:
        return "decode"
    qps = acc.online_qps(row)
    if qps is not None and np.isfinite(qps) and acc.is_simulated(row) and not is_time_metric(metric):
        isl, osl = acc._int(row["isl"], 0), acc._int(row["osl"], 1)
        offered = qps * osl * ((isl + osl) / osl if metric.startswith("total") else 1.0)
        return "throughput" if pred < SATURATED * offered else None
    b = row_batch(row, pred)
    return "throughput" if b is None else decode_regime(b)


def row_family(row, pred: float) -> Family | None:
    """The residual family of a predicted row (None: left out, see the module docstring)."""
    regime = row_regime(row, pred)
    if regime is None:
        return None
    engine = acc.engine_for(row["engine"])
    gpu = acc.system_for(row["gpu"]).gpu.id
    return Family(engine, hw_family(gpu), is_moe(acc.model_for(row["model"])), regime)


def inside(fam: Family, r: float, table: IntervalTable, confidence: int = DEFAULT_CONFIDENCE) -> tuple[bool, str]:
    """Whether residual ``r`` lies in ``fam``'s interval of ``table`` (the widened interval figures carry), and the
    fallback level used."""
    band = table.band(fam)
    lo, hi = band.time_factors(confidence)
    return math.log(lo) - 1e-12 <= r <= math.log(hi) + 1e-12, band.level


def fit_widening(by_unit: dict[str, list[dict]], without: str | None = None) -> dict[str, dict[str, float]]:
    """The conformal widening by confidence level and regime (intervals.conformal_widening) of the items of every
    unit but ``without``: each unit's items are scored against a table fitted on the other units' residuals
    (``without``'s left out too, so a nested coverage check never sees its own rows)."""
    units = [u for u in by_unit if u != without]
    scores: dict[int, dict[str, list[float]]] = {80: {}, 90: {}}
    for unit in units:
        table = IntervalTable({"families": fit_table((x["family"], x["r"]) for u in units if u != unit
                                                     for x in by_unit[u])})
        for conf, out in scores.items():
            for x in by_unit[unit]:
                out.setdefault(x["family"].regime, []).append(conformity(table.band(x["family"]), x["r"], conf))
    return {str(conf): {regime: round(conformal_widening(v, conf), 4) for regime, v in sorted(per.items())}
            for conf, per in scores.items()}


def _share(flags: list[bool]) -> dict:
    return {"n": len(flags), "share": round(float(np.mean(flags)), 4) if flags else None}


def coverage(items: list[dict], table_for) -> dict:
    """Share of ``items`` (dicts with family, r, unit, engine) inside their 80% / 90% interval, overall and by
    engine, regime and fallback level; ``table_for(unit)`` gives the table an item is checked against."""
    out: dict = {}
    tables = {u: table_for(u) for u in dict.fromkeys(it["unit"] for it in items)}  # once for both levels
    for conf in (80, 90):
        flags, by_engine, by_regime, by_level = [], {}, {}, {}
        for it in items:
            ok, level = inside(it["family"], it["r"], tables[it["unit"]], conf)
            flags.append(ok)
            by_engine.setdefault(it["family"].engine, []).append(ok)
            by_regime.setdefault(it["family"].regime, []).append(ok)
            by_level.setdefault(level, []).append(ok)
        out[str(conf)] = {**_share(flags), "by_engine": {k: _share(v) for k, v in sorted(by_engine.items())},
                          "by_regime": {k: _share(v) for k, v in sorted(by_regime.items())},
                          "by_level": {k: _share(v) for k, v in sorted(by_level.items())}}
    return out


def interval_coverage(results, table: IntervalTable | None = None) -> dict:
    """accuracy.py --json's ``interval_coverage``: the share of predicted rows (``evaluate``'s results) whose
    measured value lies inside the 80% interval of the shipped table (not nested: the table saw these rows'
    held-out residuals; the honest figure is fit_intervals.py's nested one)."""
    table = table or load_table()
    items = []
    for r, pred, _meas, _err in results:
        try:
            fam = row_family(r, pred)
        except (acc.Skip, acc.ClusterfitError):
            continue
        if fam is not None:
            items.append({"family": fam, "r": residual(r, pred), "unit": ""})
    cov = coverage(items, lambda _u: table)
    return {"confidence": DEFAULT_CONFIDENCE, "rows": cov["80"]["n"], "share": cov["80"]["share"],
            "share_90": cov["90"]["share"], "by_engine": cov["80"]["by_engine"], "by_regime": cov["80"]["by_regime"],
            "table": table.describe(),
            "note": "shipped table on the rows predicted here (in-sample for the table); nested grouped-CV coverage: "
                    "benchmarks/fit_intervals.py"}


def held_out_items(path: str, engine: str, max_folds: int | None, workers: int,
                   oss_fits: list[str] = ()) -> tuple[list[dict], dict]:
    """Every held-out row of one CSV as {id, family, r, unit} and what was left out (by reason)."""
    from fit_oss_engines import held_out_errors

    cv = acc.grouped_cv(path, ("table",), engine=engine, max_folds=max_folds, workers=workers, keep_rows=True)
    rows = {r["id"]: r for r in acc.read_rows(path)}
    page_held = {}
    for fit_file in oss_fits:
        page_held.update({rid: v for rid, v in held_out_errors(fit_file, path).items() if rid in rows})
    items, left = [], {}
    name = Path(path).name
    for rid, (err, fold) in cv["table"]["held_out_rows"].items():
        row = rows[rid]
        if rid in page_held:
            # held out by source page for the constants; nested by source table for the interval table, like the
            # other rows no refit held out
            err, fold = page_held[rid], None
        pred = float(row["value"]) * (1.0 + err / 100.0)
        try:
            fam = row_family(row, pred)
        except (acc.Skip, acc.ClusterfitError) as exc:
            left[f"no family: {str(exc)[:60]}"] = left.get(f"no family: {str(exc)[:60]}", 0) + 1
            continue
        if fam is None:
            left["online throughput at a finite rate, not saturated"] = \
                left.get("online throughput at a finite rate, not saturated", 0) + 1
            continue
        unit = f"{name}#fold{fold}" if fold is not None else f"{name}#table {acc.table_of(row)}"
        items.append({"id": rid, "family": fam, "r": residual(row, pred), "unit": unit})
    summary = {"calibration_rows": cv["calibration_rows"], "held_out_predicted": len(cv["table"]["held_out_rows"]),
               "folds": cv["table"]["folds"], "groups_refit": cv["table"]["groups_refit"],
               "held_out": cv["table"]["held_out"]["all"], "left_out": left,
               "rows_held_out_by_source_page": len(page_held)}
    return items, summary


def model_commit() -> tuple[str, list[str]]:
    """The commit of the clusterfit source that predicted the rows, and the model files that differ from it
    (uncommitted changes under src/clusterfit, other than the interval table itself)."""
    src = Path(acc.__file__).resolve().parents[1]

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", "-C", str(src), *args], capture_output=True, text=True,
                                  check=True).stdout.rstrip()   # not strip(): porcelain lines start with a space
        except (OSError, subprocess.CalledProcessError):
            return ""
    head = git("rev-parse", "HEAD") or "unknown (not a git checkout)"
    dirty = [line[3:] for line in git("status", "--porcelain", "--", "src/clusterfit", "benchmarks/accuracy.py")
             .splitlines() if not line[3:].endswith(("intervals.json", "intervals.py"))]
    return head, dirty


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", nargs="+", help="development CSVs (shared/reference/published/*.csv)")
    ap.add_argument("--engine", default="trtllm", help="the engine whose constants --calibrate fits (refitted per fold)")
    ap.add_argument("--max-folds", type=int, default=10, help="merge source tables into at most this many refits")
    ap.add_argument("--workers", type=int, default=2, help="refits run in this many processes")
    ap.add_argument("--out", default=str(INTERVALS_JSON), help="where to write the table")
    ap.add_argument("--oss-fit", action="append", default=[], metavar="FILE",
                    help="a fit_oss_engines.py results file (repeatable): its engine's rows are predicted with the "
                         "constants of the grouped-CV fold that held their source page out")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    ap.add_argument("--items", metavar="FILE",
                    help="keep the held-out residuals in FILE: written after predicting them, read instead of "
                         "predicting when it exists (to study the table's fitting without the ~8 min of refits)")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    items: list[dict] = []
    per_csv = {}
    if a.items and Path(a.items).exists():
        saved = json.loads(Path(a.items).read_text())
        items = [dict(x, family=Family(**x["family"])) for x in saved["items"]]
        per_csv = saved["per_csv"]
    else:
        for path in a.csv:
            got, summary = held_out_items(path, a.engine, a.max_folds, a.workers, a.oss_fit)
            items += got
            per_csv[Path(path).name] = summary
        if a.items:
            Path(a.items).write_text(json.dumps({"per_csv": per_csv, "items": [
                dict(x, family=dataclasses.asdict(x["family"])) for x in items]}) + "\n")
    by_unit: dict[str, list] = {}
    for it in items:
        by_unit.setdefault(it["unit"], []).append(it)

    widening = fit_widening(by_unit)
    nested = coverage(items, lambda unit: IntervalTable({
        "families": fit_table((x["family"], x["r"]) for x in items if x["unit"] != unit),
        "widening": fit_widening(by_unit, without=unit)}))
    families = fit_table((x["family"], x["r"]) for x in items)
    commit, dirty = model_commit()
    command = "python benchmarks/fit_intervals.py " + " ".join(
        [*a.csv, f"--max-folds {a.max_folds}", f"--workers {a.workers}"]
        + ([f"--engine {a.engine}"] if a.engine != "trtllm" else []) + [f"--oss-fit {f}" for f in a.oss_fit])
    report = {
        "interval_coverage": {"confidence": DEFAULT_CONFIDENCE, "share": nested["80"]["share"],
                              "share_90": nested["90"]["share"], "rows": nested["80"]["n"],
                              "definition": "share of held-out rows whose measured value lies inside the interval "
                                            "of a table fitted without the row's CV fold (nested)",
                              "detail": nested},
        "widening": widening, "residuals": len(items), "units": len(by_unit), "per_csv": per_csv,
        "seconds": round(time.perf_counter() - t0, 1)}
    table = {
        "about": "Prediction-interval table of clusterfit (clusterfit/intervals.py): per family key "
                 "engine|gpu_family|dense-or-moe|regime ('*': level dropped), n grouped-CV residuals "
                 "r = log(measured time / predicted time) and their quantiles q at 'quantiles'.",
        "command": command, "date": datetime.date.today().isoformat(), "model_commit": commit,
        "model_uncommitted_changes": dirty, "csvs": [Path(p).name for p in a.csv],
        "quantiles": list(QUANTILES), "min_residuals": MIN_RESIDUALS, "widening": widening,
        "interval_coverage": {k: report["interval_coverage"][k] for k in ("confidence", "share", "share_90", "rows")},
        "families": families}
    Path(a.out).write_text(json.dumps(table, indent=1) + "\n")
    RESULTS.write_text(json.dumps({"command": command, "date": table["date"], "model_commit": commit,
                                   **report}, indent=1) + "\n")
    if a.json:
        sys.stdout.write(json.dumps(report, indent=1) + "\n")
        return 0
    cov = report["interval_coverage"]
    print(f"{len(items)} residuals in {len(by_unit)} nesting units; {report['seconds']} s")
    print(f"interval_coverage (nested): 80% -> {cov['share']}, 90% -> {cov['share_90']} over {cov['rows']} rows")
    print(f" conformal widening (log units) by confidence and regime: {widening}")
    for key in ("by_engine", "by_regime", "by_level"):
        print(f" {key}: " + ", ".join(f"{k} {v['share']} (n={v['n']})" for k, v in nested["80"][key].items()))
    for name, s in per_csv.items():
        print(f"{name}: {s['held_out_predicted']} held-out rows, {s['folds']} refits; left out {s['left_out']}")
    print(f"wrote {a.out} (model commit {commit[:12]}{', with uncommitted model changes' if dirty else ''})")
    print(f"command: {command}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
