"""Per-metric errors of a benchmarks/fit_oss_engines.py fit: the constants shipped before it, the fit on all rows, and
each row predicted with the grouped-CV fold's constants that held its source page out.

    python benchmarks/oss_held_out.py ../shared/reference/published/measured-oss2-dev.csv \\
        benchmarks/results/fit-oss-vllm.json [--out benchmarks/results/fit-oss-vllm-by-metric.json]

Statistics are run-weighted (benchmarks/published_rows.weighted_summary), split by metric group (throughput, TTFT,
TPOT / ITL, E2E; published_rows.metric_group) and, within each, by load regime (``by_load``: request rate, all at
once, closed loop; published_rows.load_regime), with the throughput rows of runs without speculative decoding apart
(``throughput_without_speculative``: accuracy.is_speculative), on the model as it is now (the fit file's constants
are replayed, not its stored figures). The README's by-metric accuracy table quotes these files
(tests/test_readme_accuracy_tables.py checks it against them).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import published_rows  # noqa: E402
from accuracy import is_speculative  # noqa: E402
from fit_oss_engines import (ENGINE_GRID, GRID, Evaluator, emit_report, engine_rows, held_out_errors,  # noqa: E402
                             within_grid)
from published_rows import by_metric_and_load, metric_group, run_weights, weighted_summary  # noqa: E402

from clusterfit.engines import Engine  # noqa: E402

#: What an engine block without a fitted constant (GRID, ENGINE_GRID) means (the Engine dataclass defaults), so the
#: constants shipped before a fit replay as they ran, not with the fitted values the engines.yaml now holds.
FITTED = set(GRID).union(*ENGINE_GRID.values())
DEFAULTS = {f.name: f.default for f in dataclasses.fields(Engine)
            if f.name in FITTED and f.default is not dataclasses.MISSING}

GROUPS = ("all", "throughput", "ttft", "tpot_itl", "e2e")


def by_group(rows: list[dict], errs: dict[str, float]) -> dict[str, dict]:
    out = {}
    for g in GROUPS:
        sel = [r for r in rows if r["id"] in errs and (g == "all" or metric_group(r["metric"]) == g)]
        if sel:
            out[g] = weighted_summary([errs[r["id"]] for r in sel], run_weights(sel))
    return out


def throughput_without_speculative(rows: list[dict], errs: dict[str, float], engine: str) -> dict:
    """Run-weighted summary of the throughput rows of runs measured without speculative decoding."""
    sel = [r for r in rows if r["id"] in errs and metric_group(r["metric"]) == "throughput"
           and not is_speculative(r, engine)]
    return weighted_summary([errs[r["id"]] for r in sel], run_weights(sel))


def summaries(rows: list[dict], errs: dict[str, float], engine: str) -> dict:
    """The report's three views of one set of errors: by metric group, by metric group and load, and the throughput
    of the runs without speculative decoding."""
    return {"by_metric": by_group(rows, errs), "by_load": by_metric_and_load(rows, errs),
            "throughput_without_speculative": throughput_without_speculative(rows, errs, engine)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("fit_file")
    ap.add_argument("--out", help="write the JSON report here")
    a = ap.parse_args(argv)
    res = json.loads(Path(a.fit_file).read_text())
    engine = res["engine"]
    rows = engine_rows(a.csv, engine)
    report = {"engine": engine, "fit_file": Path(a.fit_file).name}
    shape = res.get("sharegpt_shape", "lognormal")
    report["sharegpt_shape"] = shape
    with tempfile.TemporaryDirectory() as tmp, published_rows.sharegpt_shape(shape):
        ev = Evaluator(engine, tmp)
        for name, params in (("shipped_before_the_fit", {**DEFAULTS, **res["shipped_constants"]}),
                             ("fitted_in_sample", within_grid(engine, res["fitted"]["params"]))):
            report[name] = {"params": params, **summaries(rows, ev.percent_errors(params, rows), engine)}
    held = held_out_errors(a.fit_file, a.csv, rows)
    report["held_out_by_page"] = summaries(rows, held, engine)
    emit_report(report, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
