"""Would per-GPU-family constants help vLLM or SGLang? Fit the engine's step constants on one GPU family's rows alone,
and estimate that fit on pages it never saw.

    python benchmarks/fit_oss_family.py ../shared/reference/published/measured-oss2-dev.csv --engine sglang \\
        --family a100 [--out benchmarks/results/fit-oss-sglang-family-a100.json]

The start and the other families are the shipped fit (benchmarks/results/fit-oss-ENGINE.json, replayed within
fit_oss_engines.GRID). The family's constants (every GRID constant but the front end's request_latency_s, which is
the serving front end's and not the GPU's) are fitted by the same coordinate descent and loss as the global ones
(fit_oss_engines.fit) on the family's calibrating rows, then each of the family's source pages is predicted with
constants fitted on the family's other pages (leave one page out). The report sets that beside the global
constants on the same rows. An experiment, not a calibration step: nothing is written to the catalog (the README
says what it found for SGLang on A100, and why it was not shipped).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from accuracy import hw_family  # noqa: E402
from fit_oss_engines import (GRID, Evaluator, emit_report, engine_rows, fit, source_page,  # noqa: E402
                             unoptimised_path, within_grid)
from oss_held_out import by_group  # noqa: E402

#: Constants a GPU family may set: the step model's, not the front end's per-request latency.
FAMILY_GRID = {k: v for k, v in GRID.items() if k != "request_latency_s"}


def family_of(row: dict) -> str:
    """The GPU family whose constants a row's GPU uses (accuracy.hw_family: 'hopper' where engines names none)."""
    return hw_family(row["gpu"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--engine", choices=("vllm", "sglang"), required=True)
    ap.add_argument("--family", required=True, help="a GPU family of engines.gpu_family (a100, blackwell, ...) or "
                                                    "hopper (the GPUs of no other family)")
    ap.add_argument("--out", help="write the JSON report here")
    a = ap.parse_args(argv)
    t0 = time.time()
    shipped = json.loads((Path(__file__).resolve().parent / "results" / f"fit-oss-{a.engine}.json").read_text())
    base = within_grid(a.engine, shipped["fitted"]["params"])
    rows = [r for r in engine_rows(a.csv, a.engine) if family_of(r) == a.family]
    cal = [r for r in rows if not unoptimised_path(r, a.engine)]
    pages = sorted({source_page(r) for r in cal})
    if len(pages) < 2:
        print(f"error: --family: {a.family} has {len(pages)} {a.engine} source page(s) with calibrating rows; "
              "leaving one out needs two", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        ev = Evaluator(a.engine, tmp)
        full = fit(ev, cal, base, FAMILY_GRID, log=lambda *_: None)
        held: dict[str, float] = {}
        folds = []
        for page in pages:
            f = fit(ev, [r for r in cal if source_page(r) != page], base, FAMILY_GRID, log=lambda *_: None)
            held.update(ev.percent_errors({**base, **f["params"]}, [r for r in cal if source_page(r) == page]))
            folds.append({"page_left_out": page, "params": f["params"]})
        in_sample = ev.percent_errors({**base, **full["params"]}, cal)
        report = {"engine": a.engine, "family": a.family, "rows": len(cal), "pages": pages,
                  "global_constants": {"params": base, "by_metric": by_group(cal, ev.percent_errors(base, cal))},
                  "family_fit": {**full, "by_metric": by_group(cal, in_sample)},
                  "family_held_out_by_page": {"folds": folds, "by_metric": by_group(cal, held)},
                  "seconds": round(time.time() - t0, 1)}
    emit_report(report, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
