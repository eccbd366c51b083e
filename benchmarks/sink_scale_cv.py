"""Leave-one-page-out check of vLLM's ``sink_attention_prefill_scale`` (engines.py: the prefill attention of layers
with attention sinks on GPUs before Hopper, which vLLM runs with its Triton backend).

    python benchmarks/sink_scale_cv.py ../shared/reference/published/measured-oss2-dev.csv \
        [--fit-file benchmarks/results/fit-oss-vllm.json] [--out benchmarks/results/sink-scale-cv.json]

fit_oss_engines.py's two folds of pages (--folds 2) put every page the constant touches into one fold, so those
held-out figures cannot test it; its default, each page left out in turn, refits it with every other constant. Here
the scale alone is checked. The rows it touches are those whose prediction changes between the ends of its grid
(fit_oss_engines.ENGINE_GRID); each of their source pages is predicted with the scale fitted (run-weighted soft-L1,
fit_oss_engines.loss) on the other such pages' rows alone, the engine's other constants as shipped. Printed and
written: per page the fitted scale and the page's run-weighted errors at scale 1 (FlashAttention's efficiency), at
the held-out fit and at the shipped value. With ``--fit-file`` (fit_oss_engines.py's vLLM results) also the engine's
held-out-by-page errors by metric group (oss_held_out.py's groups) with the touched rows taken from this check
instead: every constant then validated on pages it was not fitted on (the rows' other constants are the shipped ones,
which the fold holding these pages fitted too).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fit_oss_engines import ENGINE_GRID, Evaluator, emit_report, engine_rows, held_out_errors, loss, source_page  # noqa: E402,E501
from oss_held_out import by_group  # noqa: E402
from published_rows import run_weights, weighted_summary  # noqa: E402

NAME = "sink_attention_prefill_scale"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--fit-file", help="fit_oss_engines.py's vLLM results: report the held-out-by-page errors with "
                                       "the touched rows replaced by this check's")
    ap.add_argument("--out", help="write the JSON report here")
    a = ap.parse_args(argv)
    grid = ENGINE_GRID["vllm"][NAME]
    all_rows = engine_rows(a.csv, "vllm")
    with tempfile.TemporaryDirectory() as tmp:
        ev = Evaluator("vllm", tmp)
        shipped = float(ev.base["engines"]["vllm"][NAME])
        lo, hi = (ev.log_errors({NAME: v}, all_rows) for v in (min(grid), max(grid)))
        touched = np.abs(lo - hi) > 1e-9
        rows = [r for r, t in zip(all_rows, touched) if t]
        z = {min(grid): lo[touched], max(grid): hi[touched]}
        z.update({v: ev.log_errors({NAME: v}, rows) for v in grid if v not in z})
    page_of = np.array([source_page(r) for r in rows])
    report: dict = {"constant": NAME, "grid": grid, "shipped": shipped, "rows": len(rows), "pages": {}}

    def stats(z_rows: np.ndarray, sel: np.ndarray) -> dict:
        return weighted_summary(list(np.expm1(z_rows[sel]) * 100.0), run_weights([r for r, s in zip(rows, sel) if s]))

    held = np.empty(len(rows))  # each row's log error under the scale fitted without its page
    for page in sorted(set(page_of)):
        test = page_of == page
        w = np.array(run_weights([r for r, s in zip(rows, ~test) if s]))
        best = min(grid, key=lambda v: (loss(z[v][~test], w), -v)) if (~test).any() else 1.0
        held[test] = z[best][test]
        report["pages"][page] = {"fitted_on_the_other_pages": best, "at_1": stats(z[1.0], test),
                                 "held_out": stats(held, test), "at_shipped": stats(z[shipped], test)}
    every = np.ones(len(rows), bool)
    report["all_pages"] = {"at_1": stats(z[1.0], every), "held_out": stats(held, every),
                           "at_shipped": stats(z[shipped], every)}
    if a.fit_file:
        errs = held_out_errors(a.fit_file, a.csv, all_rows)
        by_page = by_group(all_rows, errs)
        errs.update({r["id"]: float(e) for r, e in zip(rows, np.expm1(held) * 100.0)})
        report["held_out_by_page"] = {"fit_file": Path(a.fit_file).name, "as_fitted": by_page,
                                      "touched_rows_left_one_page_out": by_group(all_rows, errs)}
    emit_report(report, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
