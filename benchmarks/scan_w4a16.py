"""Scan the W4A16 MoE ceilings (clusterfit.perfmodel.step.WEIGHT_ONLY_MAX_EFF for the Triton matmul_ogs kernel,
WEIGHT_ONLY_MARLIN_MAX_EFF for Marlin) with leave-one-source-page-out validation, one kernel family at a time.

    python benchmarks/scan_w4a16.py ../shared/reference/published/measured-dev.csv \\
        ../shared/reference/published/measured-oss2-dev.csv --out benchmarks/results/scan-w4a16.json

Rows: every gpt-oss row (the models whose experts ship in mxfp4) on a GPU without fp4 tensor cores (A100, H100,
H200; Blackwell, MI300-class and RTX PRO rows are left out), TensorRT-LLM and vLLM (SGLang's gpt-oss rows on those
GPUs run 3-15x below both other engines on the same pages, so they would only pull the ceiling down for the
others). The rows split by the kernel vLLM runs on their GPU (step.weight_only_kernel: Marlin below compute capability
9.0, Triton on Hopper); each family's ceiling is scanned on its own rows, the other family's held at its shipped
value. For each candidate ceiling every row is predicted once (WEIGHT_ONLY_M0 = 16 rows of tile fill throughout); then
each source page in turn is held out, the ceiling with the lowest run-weighted median error on the family's other
pages is chosen, and the held-out page is scored with it. The report gives every candidate's in-sample figures, the
choice per held-out page and the pooled held-out figures (run-weighted, benchmarks/published_rows.weighted_summary).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accuracy as acc  # noqa: E402
from fit_oss_engines import emit_report, source_page  # noqa: E402
from published_rows import read_rows, run_weights, weighted_summary  # noqa: E402

from clusterfit.perfmodel import step as st  # noqa: E402
from clusterfit.precision import weight_format  # noqa: E402

CAPS = (0.15, 0.2, 0.25, 0.3, 0.35, 0.4)
#: kernel family -> the step-module constant that holds its ceiling
FAMILIES = {"triton": "WEIGHT_ONLY_MAX_EFF", "marlin": "WEIGHT_ONLY_MARLIN_MAX_EFF"}
NO_W4A16 = ("B200", "B300", "GB200", "GB300", "MI3", "RTX")


def w4a16_rows(paths: list[str]) -> list[dict]:
    rows = []
    for p in paths:
        rows += [r for r in read_rows(p)
                 if "gpt-oss" in r["model"] and not any(g in r["gpu"] for g in NO_W4A16)
                 and acc.engine_for(r["engine"]) in ("trtllm", "vllm")]
    return rows


def kernel_family(row: dict) -> str | None:
    """The W4A16 kernel vLLM runs on the row's GPU; None where the harness cannot place the GPU."""
    try:
        return st.weight_only_kernel(acc.system_for(row["gpu"]).gpu, weight_format("mxfp4"))
    except (acc.Skip, acc.ClusterfitError):
        return None


def errors_by_cap(rows: list[dict], caps=CAPS, constant: str = "WEIGHT_ONLY_MAX_EFF") -> dict[float, dict[str, float]]:
    """Row id -> error % for each value of the step-module ceiling ``constant`` (rows a ceiling cannot predict are
    left out of it)."""
    out: dict[float, dict[str, float]] = {}
    saved = getattr(st, constant)
    try:
        for cap in caps:
            setattr(st, constant, cap)
            acc.step_for.cache_clear()
            got = {}
            for r in rows:
                try:
                    pred = acc.predict_row(r)
                except (acc.Skip, acc.ClusterfitError):
                    continue
                got[r["id"]] = (pred - float(r["value"])) / float(r["value"]) * 100.0
            out[cap] = got
    finally:
        setattr(st, constant, saved)
        acc.step_for.cache_clear()
    return out


def summary(rows: list[dict], errs: dict[str, float]) -> dict:
    return weighted_summary([errs[r["id"]] for r in rows], run_weights(rows))


def scan_family(rows: list[dict], constant: str) -> dict:
    """In-sample figures per candidate ceiling and leave-one-page-out picks for one kernel family's rows."""
    errs = errors_by_cap(rows, constant=constant)
    rows = [r for r in rows if all(r["id"] in e for e in errs.values())]
    pages = sorted({source_page(r) for r in rows})
    held, picks = {}, {}
    for pg in pages:
        train = [r for r in rows if source_page(r) != pg]
        best = min(CAPS, key=lambda c: summary(train, errs[c])["median_ape"])
        picks[pg] = best
        held.update({r["id"]: errs[best][r["id"]] for r in rows if source_page(r) == pg})
    return {"constant": constant, "shipped_cap": getattr(st, constant), "rows": len(rows), "pages": len(pages),
            "in_sample": {str(c): summary(rows, errs[c]) for c in CAPS},
            "leave_one_page_out": {"picks": picks, "held_out": summary(rows, held)}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--out", help="write the JSON report here")
    a = ap.parse_args(argv)
    rows = w4a16_rows(a.csv)
    report = {"w4a16_m0": st.WEIGHT_ONLY_M0,
              "families": {fam: scan_family([r for r in rows if kernel_family(r) == fam], const)
                           for fam, const in FAMILIES.items()}}
    emit_report(report, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
