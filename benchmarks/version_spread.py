"""How far the published tables disagree with themselves: the noise floor a version-blind model meets.

    python benchmarks/version_spread.py ../shared/reference/published/measured-dev.csv [--engine trtllm] [--out F]

The TensorRT-LLM performance overviews measure the same configuration (model, GPU, TP / PP / EP / DP, weight
precision, ISL / OSL, load regime, metric) again in later releases (v0.14, v0.17, v0.20, v1.0, post-1.0). clusterfit
models no software version, so its prediction of such a configuration is one number, and its grouped
cross-validation leaves one table (one release) out. This script measures how well the best version-blind
predictions could do on those configurations:

- other_version: each release's value predicted by another release's measurement of the identical configuration
  (every ordered pair): what leaving a table out costs even a model that reproduced the other table exactly;
- geometric_mean: each release's value predicted by the geometric mean of all releases' values of that
  configuration (the best single number in log terms);
- clusterfit: the harness's prediction (accuracy.predict_row, fitted on all rows) of the same rows;
- clusterfit_held_out (with --held-out, TensorRT-LLM only; ``seconds`` says how long the run took): the same rows
  predicted by the leave-one-table-out refits of accuracy.grouped_cv (10 folds), as the README's accuracy table
  quotes it.

Models are keyed by the catalog model the harness resolves them to (accuracy.resolve_model: Llama-3-70B runs
Llama-3.1-70B's shapes), so a renamed checkpoint of the same network counts as the same configuration. Ratios are
APE in percent, summarised as median and 90th percentile (accuracy.summarise).
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import accuracy  # noqa: E402  (the harness beside this file)
import fit_intervals  # noqa: E402


def configuration(row: dict) -> tuple:
    """What makes two rows the same measurement, software version aside."""
    model = accuracy.resolve_model(row["model"]) or row["model"]
    return (model, row["gpu"], row["tp"], row["pp"], row["ep"], row["dp"], row["precision_weights"],
            row["precision_kv"], row["isl"], row["osl"], row["concurrency_or_mode"].split(";")[0].strip().lower(),
            row["metric"])


def version_groups(rows: list[dict], engine: str) -> dict[tuple, dict[str, dict]]:
    """Configuration -> {source_date (the release): first row}, for configurations measured in two or more."""
    groups: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for r in rows:
        if accuracy.engine_for(r["engine"]) == engine:
            groups[configuration(r)].setdefault(r["source_date"], r)
    return {k: v for k, v in groups.items() if len(v) > 1}


def table_held_out_errors(path: str, engine: str, workers: int) -> dict[str, float]:
    """Row id -> held-out error % under leave-one-table-out grouped CV (accuracy.grouped_cv, 10 folds)."""
    cv = accuracy.grouped_cv(path, ("table",), engine, max_folds=10, workers=workers, keep_rows=True)
    return {i: e for i, (e, _) in cv["table"]["held_out_rows"].items()}


def spread(groups: dict[tuple, dict[str, dict]], held_out: dict[str, float] | None = None) -> dict:
    """APE of the other-version and geometric-mean predictions, and of clusterfit's, on the grouped rows."""
    other, mean, model = [], [], []
    for by_version in groups.values():
        vals = {d: float(r["value"]) for d, r in by_version.items()}
        gm = float(np.exp(np.mean(np.log(list(vals.values())))))
        for (_, a), (_, b) in itertools.permutations(vals.items(), 2):
            other.append((b - a) / a * 100.0)
        for d, r in by_version.items():
            mean.append((gm - vals[d]) / vals[d] * 100.0)
            try:
                model.append((accuracy.predict_row(r) - vals[d]) / vals[d] * 100.0)
            except (accuracy.Skip, accuracy.ClusterfitError):
                pass
    out = {"configurations": len(groups), "rows": sum(len(v) for v in groups.values()),
           "other_version": accuracy.summarise(other), "geometric_mean": accuracy.summarise(mean),
           "clusterfit": accuracy.summarise(model)}
    if held_out is not None:
        out["clusterfit_held_out"] = accuracy.summarise([held_out[r["id"]] for v in groups.values()
                                                         for r in v.values() if r["id"] in held_out])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--engine", default="trtllm", help="the engine's rows (trtllm, vllm, sglang)")
    ap.add_argument("--out", help="also write the JSON result to this file")
    ap.add_argument("--held-out", action="store_true", help="also clusterfit's leave-one-table-out errors")
    ap.add_argument("--workers", type=int, default=2, help="--held-out: refits run in this many processes")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows = accuracy.read_rows(args.csv)
    held = table_held_out_errors(args.csv, args.engine, args.workers) if args.held_out else None
    commit, dirty = fit_intervals.model_commit()
    out = {"command": "python benchmarks/version_spread.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "date": datetime.date.today().isoformat(), "model_commit": commit + (" + uncommitted " + ", ".join(dirty)
                                                                                if dirty else ""),
           "csv": Path(args.csv).name, "engine": args.engine, **spread(version_groups(rows, args.engine), held),
           "seconds": round(time.perf_counter() - t0, 1)}
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
