"""Fit vLLM's or SGLang's time constants on the published runs of that engine, and estimate the fit's accuracy on
source pages it never saw.

    python benchmarks/fit_oss_engines.py ../shared/reference/published/measured-oss2-dev.csv --engine vllm \
        --out benchmarks/results/fit-oss-vllm.json [--write]

What is fitted: the engine's seven global time constants (engine.yaml: step_overhead_s, seq_overhead_s,
kernel_overhead_s, graph_kernel_overhead_s, compute_scale, memory_scale, request_latency_s), the same values for
every model, GPU and source: no per-row, per-model, per-source or per-GPU-family factor (the vLLM / SGLang rows are
too few per GPU family to fit one apart). Runs of an expert path the engine itself calls unoptimised on their GPU
(unoptimised_path) are predicted and reported but do not calibrate. The search is a coordinate descent over the
physical grids in GRID (each pass tries every value of one constant with the others held, keeps the best, and stops
when a pass changes nothing), because every evaluation replays ~100 benchmark runs through the simulator
(benchmarks/accuracy.py predict_row) and a gradient through those discrete schedules is not smooth.

The loss is the run-weighted mean soft-L1 of the log error (accuracy.F_SCALE, the TensorRT-LLM calibration's): every
run (published_rows.run_key: the TTFT, TPOT, ITL and throughput one configuration printed) weighs 1 in total, so a
page printing eight metrics per run does not count eight times.

The front end's per-request latency (request_latency_s) is chosen on the rows that pin it (FIT_ROWS,
informs_front_end: TTFT and end-to-end latencies of runs whose requests are not all sent at once), the other
constants on every row: in an all-at-once run the wait for admission swamps a 10 ms front end. Fitted on every row,
the saturated runs' TTFTs, under-predicted for other reasons, pulled it to the top of its grid whenever the one page
that pins it was left out (held out by page, vLLM's request-rate TTFT median 67.7%; 14.3% chosen on its rows).

Validation is grouped, the way new data arrives: each of the engine's source pages (source_repo_or_site x
source_path_or_title) is predicted with constants fitted on the other pages only (leave one page out, the default
``--folds pages``; ``--folds N`` deals the pages into N folds balanced by run count instead, which holds out half
the pages at once with 2). The held-out summary is what to expect on a new page; the in-sample one is reported next
to it. Every fold's coordinate descent starts from the shipped constants, as the fit on all rows does, so the folds
mostly visit the same candidates: the Evaluator predicts each row once per candidate, and leaving every page out
costs little more than the fit on all rows.

``--fit`` names the constants to fit (the others stay as shipped): e.g. only the engine's host and launch costs,
keeping the kernel efficiencies of the H200 probes (compute_scale = memory_scale = 1). ``--write`` stores the
full-data fit in src/clusterfit/catalog/engines.yaml (the body; the header comments stay).
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import accuracy as acc  # noqa: E402
import published_rows  # noqa: E402
from published_rows import Skip, read_rows, run_key, run_weights, weighted_summary  # noqa: E402

from clusterfit.errors import ClusterfitError  # noqa: E402

#: The grid each constant is searched over (SI units). Bounds are physical: memory_scale <= 1 keeps every streaming
#: kernel at or below the fastest one measured on the H200 (accuracy.GLOBAL_PARAMS), compute_scale <= 1.3 keeps
#: the GEMM asymptote under the datasheet peak (0.752 x 1.3 = 0.98), host and kernel costs stay under 100 us per
#: sequence / kernel (tests/test_calibration.py holds every engine to these). Two bounds are tighter than
#: physics alone: step_overhead_s <= 4 ms and memory_scale >= 0.9. A larger per-step floor or a slower memory
#: scale puts a batch-1 Llama-3.1-8B decode step on one H200 beyond the 5-6 ms that engines with CUDA graphs run
#: it in: such values absorb per-request front-end work (tokenisation, HTTP, detokenisation) that the step model
#: does not have (an earlier, unbounded run, whose output was not kept, went to an 8 ms step and a 0.6 scale).
#: kernel_overhead_s <= 10 us (steps outside a full CUDA graph: prefill, mixed, above the capture size): vLLM V1
#: replays piecewise graphs for mixed batches up to its capture size, so outside full graphs 10 us per kernel
#: already charges every kernel a CPU launch in the middle of the 5-20 us range of engines.EAGER_LAUNCH_S's source.
#: Up to 50 us the fit took the top value (in-sample vLLM 25.9% / -2.2% / 85.1%, SGLang 21.2% / -7.8% / 64.9%,
#: benchmarks/results/fit-oss-kernel-cap-50us.json; 26.8% / -4.8% / 79.8% and 24.7% / -9.3% / 72.6% with this
#: grid), but it is absorbing per-request front-end work
#: the step model does not have, and it made the decode steps above the capture size (no graph) so much slower than
#: the planner's operating point that the shipped examples' plans missed their TPOT in simulation
#: (tests/test_plan_sim_agreement.py). graph_kernel_overhead_s <= kernel_overhead_s's grid (a replayed kernel
#: costs no more than a launched one). request_latency_s (the front end's per-request latency, engines.py) <= 50 ms:
#: the light-load vLLM TTFT rows of the development pages sat -3 to 75 ms above their engine steps before it existed
#: (README, "front-end latency").
GRID = {
    "step_overhead_s": [0.5e-3, 1e-3, 2e-3, 3e-3, 4e-3],
    "seq_overhead_s": [0.0, 20e-6, 40e-6, 60e-6, 80e-6],
    "kernel_overhead_s": [2e-6, 5e-6, 10e-6],
    "graph_kernel_overhead_s": [1e-6, 2e-6, 3.5e-6],
    "compute_scale": [0.7, 0.85, 1.0, 1.15, 1.3],
    "memory_scale": [0.9, 0.95, 1.0],
    "request_latency_s": [0.0, 5e-3, 10e-3, 20e-3, 30e-3, 50e-3],
}
#: Constants fitted for one engine only, on top of GRID. vLLM serves attention-sink layers (gpt-oss) with its Triton
#: backend before Hopper (engines.py, sink_attention_prefill_scale): its A100 gpt-oss pages fit the scale. SGLang's
#: A100 gpt-oss rows are 6-19x slower than any of its constants make them (a path the model does not have), so its
#: scale stays 1.
ENGINE_GRID: dict[str, dict[str, list[float]]] = {
    "vllm": {"sink_attention_prefill_scale": [0.3, 0.4, 0.5, 0.6, 0.8, 1.0]},
    "sglang": {},
}
#: A prediction that fails under a candidate (it should not: the constants are times, not sizes) counts as a 3x miss.
FAILED_LOG_ERROR = math.log(3.0)


def within_grid(engine: str, params: dict) -> dict:
    """``params`` with each constant of GRID / ENGINE_GRID held inside that grid's range: a fit file written before
    a grid's bound was tightened (graph_kernel_overhead_s 5 -> 3.5 us, 2026-12-05) replays at the new bound, as
    its search would have ended there: refitted alone on the new grid every page fold of both engines takes 3.5 us
    (fit-oss-vllm-graph-bound.json; SGLang's full refit), where vLLM's folds had taken 5 us in 10 of 16, 2 us in 6."""
    grid = {**GRID, **ENGINE_GRID[engine]}
    return {k: (min(max(v, min(grid[k])), max(grid[k])) if k in grid else v) for k, v in params.items()}


def unoptimised_path(row: dict, engine: str) -> bool:
    """Whether the row ran the model's routed experts through a path the engine itself calls unoptimised on that GPU
    (Engine.unoptimised_experts: SGLang's mxfp4 MoE before Hopper). Such runs measure a kernel the step model does
    not describe (perf says so in a note), so they do not calibrate the engine's constants; the held-out reports
    (oss_held_out.py, fit_intervals.py) still predict them."""
    from clusterfit.compose import Catalog
    from clusterfit.precision import experts_format

    model = acc.model_for(row["model"])
    system = acc.system_for(row["gpu"])
    weights, kv = acc.precision_strings(row)
    prec = acc.precision_for(model, weights, kv, engine)
    eng = Catalog(acc.system_catalog()).engine(engine, system)
    return eng.unoptimised_experts(experts_format(model, prec), system.gpu) is not None


def engine_rows(path: str, engine: str) -> list[dict]:
    """The engine's rows that the harness predicts with the shipped constants (skips are the harness's, with
    reasons, in benchmarks/accuracy.py --json)."""
    acc.use_engines(None)
    out = []
    for r in read_rows(path):
        if acc.engine_for(r["engine"]) != engine:
            continue
        try:
            acc.predict_row(r)
        except (Skip, ClusterfitError):
            continue
        out.append(r)
    return out


def source_page(row: dict) -> str:
    return f"{row['source_repo_or_site']}|{row['source_path_or_title']}"


def folds_arg(text: str) -> int | str:
    """--folds: 'pages' or a whole number (0, or 2 and more)."""
    if text == "pages":
        return text
    if not text.isdigit() or int(text) == 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give 'pages', 0 or a whole number of folds >= 2")
    return int(text)


def page_folds(rows: list[dict], folds: int | str) -> dict[str, int]:
    """Source page -> fold. ``folds='pages'``: one fold per page (pages sorted by name), i.e. leave one page out.
    A number: pages sorted by run count (largest first, then by name) go one by one to the fold with the fewest
    runs so far."""
    runs: dict[str, set[str]] = {}
    for r in rows:
        runs.setdefault(source_page(r), set()).add(run_key(r))
    if folds == "pages":
        return {page: k for k, page in enumerate(sorted(runs))}
    assert isinstance(folds, int)
    load = [0] * folds
    out = {}
    for page in sorted(runs, key=lambda p: (-len(runs[p]), p)):
        k = min(range(folds), key=lambda i: (load[i], i))
        out[page] = k
        load[k] += len(runs[page])
    return out


class Evaluator:
    """Predicts a set of rows under candidate constants of one engine (the rest of the catalog as shipped)."""

    def __init__(self, engine: str, tmp: str):
        import yaml

        from clusterfit.engines import ENGINES_YAML

        self.engine = engine
        self.base = yaml.safe_load(ENGINES_YAML.read_text())
        self.path = os.path.join(tmp, "engines.yaml")
        self.calls = 0
        # candidate constants -> row id -> log error: the folds of a grouped CV visit the same candidates as the
        # fit on all rows (coordinate descent from the same start), so each row is predicted once per candidate
        self._memo: dict[tuple, dict[str, float]] = {}

    def log_errors(self, params: dict, rows: list[dict]) -> np.ndarray:
        """log(predicted / measured) of each row under the engine's constants updated with ``params``."""
        known = self._memo.setdefault(tuple(sorted(params.items())), {})
        missing = [r for r in rows if r["id"] not in known]
        if missing:
            cfg = copy.deepcopy(self.base)
            cfg["engines"][self.engine].update(params)
            acc.use_engines(cfg, self.path)
            self.calls += 1
            for r in missing:
                try:
                    pred = acc.predict_row(r)
                    known[r["id"]] = (math.log(pred / float(r["value"])) if pred > 0 and math.isfinite(pred)
                                      else FAILED_LOG_ERROR)
                except (Skip, ClusterfitError):
                    known[r["id"]] = FAILED_LOG_ERROR
            acc.use_engines(None)
        return np.array([known[r["id"]] for r in rows])

    def percent_errors(self, params: dict, rows: list[dict]) -> dict[str, float]:
        """Row id -> 100 x (predicted / measured - 1) under ``params`` (log_errors, as the reports print them)."""
        return {r["id"]: float(np.expm1(z) * 100.0) for r, z in zip(rows, self.log_errors(params, rows), strict=True)}


def loss(z: np.ndarray, w: np.ndarray) -> float:
    """Run-weighted mean soft-L1 of the log errors z."""
    f = acc.F_SCALE
    rho = 2.0 * f * f * (np.sqrt(1.0 + (z / f) ** 2) - 1.0)
    return float(np.sum(w * rho) / np.sum(w))


def informs_front_end(row: dict) -> bool:
    """Whether a row pins the front end's per-request latency (request_latency_s): a TTFT or end-to-end latency of a
    run whose requests are not all sent at once (published_rows.load_regime, the split the by-metric files report
    and fit_intervals.py's queued regime follow). There the front end's 5-50 ms is a visible share of the latency; in
    an all-at-once run (or a rate the source calls effectively all at once) the wait for admission, seconds long and
    what the model misses most there (README, "worst rows"), swamps it and would set it instead."""
    return (published_rows.metric_group(row["metric"]) in ("ttft", "e2e")
            and published_rows.load_regime(row) != "all_at_once")


#: Constants fitted on the rows that pin them, not on all rows: each such constant's coordinate step minimises the
#: loss over the rows its predicate keeps (the other constants' steps, and the reported loss, use every row).
FIT_ROWS = {"request_latency_s": informs_front_end}


def fit(ev: Evaluator, rows: list[dict], start: dict, grid: dict | None = None, max_passes: int = 4,
        log=print) -> dict:
    """Coordinate descent over ``grid`` (default GRID) from ``start`` (snapped to the grid); a constant in FIT_ROWS
    is chosen on the rows its predicate keeps (kept as it is when the rows have none)."""
    grid = GRID if grid is None else grid
    w = np.array(run_weights(rows))
    keep = {name: np.array([FIT_ROWS[name](r) for r in rows], dtype=bool) for name in grid if name in FIT_ROWS}

    def objective(params: dict, name: str | None = None) -> float:
        z = ev.log_errors(params, rows)
        m = keep.get(name) if name is not None else None
        return loss(z, w) if m is None else loss(z[m], w[m])

    cur = {k: min(grid[k], key=lambda v: abs(v - start.get(k, v))) for k in grid}
    for p in range(max_passes):
        changed = False
        for name, values in grid.items():
            if name in keep and not keep[name].any():
                continue
            best = objective(cur, name)
            for v in values:
                if v == cur[name]:
                    continue
                cand = dict(cur, **{name: v})
                val = objective(cand, name)
                if val < best - 1e-6:
                    best, cur, changed = val, cand, True
            log(f"  pass {p + 1} {name} -> {cur[name]:.3g} (loss {objective(cur):.5f}, {ev.calls} evaluations)")
        if not changed:
            break
    return {"params": cur, "loss": round(objective(cur), 6)}


def summary(rows: list[dict], z: np.ndarray) -> dict:
    errs = list(np.expm1(z) * 100.0)
    return {"rows": len(rows), "runs": len({run_key(r) for r in rows}),
            "run_weighted": weighted_summary(errs, run_weights(rows)), "rows_unweighted": acc.summarise(errs)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="published measurements (measured-oss2-dev.csv)")
    ap.add_argument("--engine", choices=("vllm", "sglang"), required=True)
    ap.add_argument("--folds", default="pages", type=folds_arg,
                    help="grouped CV by source page: 'pages' (default) leaves each page out in turn, N >= 2 deals "
                         "the pages into N folds balanced by run count, 0 skips the CV")
    ap.add_argument("--out", required=True, help="JSON results file")
    ap.add_argument("--write", action="store_true", help="store the full-data fit in catalog/engines.yaml")
    ap.add_argument("--fit", default=None, metavar="NAMES",
                    help="comma-separated constants to fit (the others stay as shipped); default: all of GRID and "
                         "the engine's ENGINE_GRID")
    ap.add_argument("--sharegpt-shape", choices=published_rows.SHAREGPT_SHAPES,
                    default=published_rows.SHAREGPT_SHAPE, help="family of the assumed ShareGPT lengths")
    args = ap.parse_args(argv)
    published_rows.SHAREGPT_SHAPE = args.sharegpt_shape
    full_grid = {**GRID, **ENGINE_GRID[args.engine]}
    names = list(full_grid) if args.fit is None else [n.strip() for n in args.fit.split(",") if n.strip()]
    unknown = [n for n in names if n not in full_grid]
    if unknown or not names:
        ap.error(f"--fit: unknown constant {unknown[0] if unknown else '(none given)'}; choose from "
                 f"{', '.join(full_grid)}")
    grid = {n: full_grid[n] for n in names}
    t0 = time.time()
    rows = engine_rows(args.csv, args.engine)
    with tempfile.TemporaryDirectory() as tmp:
        ev = Evaluator(args.engine, tmp)
        block = ev.base["engines"][args.engine]
        shipped = {k: float(block[k]) for k in full_grid if block.get(k) is not None}
        before = summary(rows, ev.log_errors(shipped, rows))
        print(f"{args.engine}: {len(rows)} rows; shipped constants {shipped}: {before['run_weighted']}", flush=True)
        # the constants are fitted on the runs of optimised kernel paths; every run is predicted and reported
        not_calibrating = {r["id"] for r in rows if unoptimised_path(r, args.engine)}
        cal = [r for r in rows if r["id"] not in not_calibrating]
        if len(cal) < len(rows):
            print(f"fitted on {len(cal)} rows: {len(rows) - len(cal)} ran an unoptimised expert path", flush=True)
        full = fit(ev, cal, shipped, grid, log=lambda s: print(s, flush=True))
        after = summary(rows, ev.log_errors(full["params"], rows))
        print(f"fitted {full['params']}: {after['run_weighted']}", flush=True)
        cv = None
        if args.folds:
            fold_of = page_folds(rows, args.folds)
            held_rows, held_z, per_fold = [], [], []
            for k in sorted(set(fold_of.values())):
                train = [r for r in cal if fold_of[source_page(r)] != k]
                test = [r for r in rows if fold_of[source_page(r)] == k]
                fk = fit(ev, train, shipped, grid, log=lambda s: print(f"[fold {k}]{s}", flush=True))
                z = ev.log_errors(fk["params"], test)
                per_fold.append({"params": fk["params"], "pages": sorted({source_page(r) for r in test}),
                                 **summary(test, z)})
                held_rows += test
                held_z.append(z)
            cv = {"folds": len(per_fold), "grouping": "source page" + (", each left out in turn"
                                                                      if args.folds == "pages" else ""),
                  "held_out": summary(held_rows, np.concatenate(held_z)),
                  "per_fold": per_fold}
            print(f"held out: {cv['held_out']['run_weighted']}", flush=True)
    out = {"engine": args.engine, "csv": os.path.basename(args.csv), "grid": grid, "loss": "run-weighted soft-L1 "
           f"of log error, f_scale {acc.F_SCALE}", "shipped_constants": shipped, "before": before,
           "sharegpt_shape": args.sharegpt_shape, "fitted": full, "in_sample": after, "grouped_cv": cv,
           "calibration_rows": len(cal), "not_calibrating": sorted(not_calibrating),
           "evaluations": ev.calls,
           "seconds": round(time.time() - t0, 1)}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    if args.write:
        write_constants(args.engine, full["params"])
    return 0


def held_out_errors(fit_file: str, csv_path: str, rows: list[dict] | None = None) -> dict[str, float]:
    """Row id -> error % for the fit file's engine: each row predicted with the constants of the grouped-CV fold
    that held its source page out (the file's grouped_cv.per_fold), so benchmarks/fit_intervals.py can treat
    vLLM / SGLang rows as held out once their constants are fitted on the same CSV. ``rows``: the engine's rows of
    the CSV when the caller already has them (engine_rows). ShareGPT runs are replayed with the length family the
    fit used (its ``sharegpt_shape``; log-normal for files from before it was recorded)."""
    res = json.loads(Path(fit_file).read_text())
    cv = res.get("grouped_cv") or {}
    if not cv.get("per_fold"):
        raise SystemExit(f"error: {fit_file}: no grouped_cv folds (rerun fit_oss_engines.py without --folds 0)")
    if res["csv"] != os.path.basename(csv_path):
        return {}   # the fit's folds are pages of another CSV
    engine = res["engine"]
    rows = engine_rows(csv_path, engine) if rows is None else rows
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp, published_rows.sharegpt_shape(res.get("sharegpt_shape", "lognormal")):
        ev = Evaluator(engine, tmp)
        for fold in cv["per_fold"]:
            pages = set(fold["pages"])
            test = [r for r in rows if source_page(r) in pages]
            out.update(ev.percent_errors(within_grid(engine, fold["params"]), test))
    return out


def emit_report(report: dict, out: str | None) -> None:
    """Print a JSON report and, with ``out``, write it there too (the analysis scripts beside this one)."""
    text = json.dumps(report, indent=1)
    print(text)
    if out:
        Path(out).write_text(text + "\n")


def write_constants(engine: str, params: dict) -> None:
    """Rewrite the body of catalog/engines.yaml with ``params`` in the engine's block, keeping the header."""
    import yaml

    from clusterfit.engines import ENGINES_YAML

    text = ENGINES_YAML.read_text()
    header = "".join(line for line in text.splitlines(keepends=True) if line.startswith("#"))
    body = yaml.safe_load(text)
    body["engines"][engine].update(params)
    ENGINES_YAML.write_text(header + yaml.safe_dump(body, sort_keys=False))


if __name__ == "__main__":
    raise SystemExit(main())
