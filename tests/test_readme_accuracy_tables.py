"""The README's accuracy tables (per engine, and vLLM / SGLang by metric) are read from the README and checked against
the result files they quote, so they cannot drift from what the harness measured. They had: SGLang's held-out
throughput read 10.4% / -2.3% / 42.1% where fit-oss-sglang-by-metric.json held 9.47% / -1.20% / 43.68%, and
TensorRT-LLM's coverage 1,058 / 1,147 where accuracy-dev.json held 1,063 / 1,165."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PER_ENGINE = ("| engine | rows predicted / rows (coverage) | shipped constants on all rows: median / bias / p90 | held "
              "out (vLLM / SGLang: each source page left out): median / bias / p90 |")
BY_METRIC = ("| engine | constants | throughput: median / bias / p90 (runs) | throughput of runs without speculative "
             "decoding | TTFT median | TPOT / ITL median | E2E median |")
SECTIONS = {"held out": "held_out_by_page", "in sample": "fitted_in_sample"}


def _table(header: str) -> list[list[str]]:
    """The cells of the README table under ``header`` (the separator line skipped)."""
    lines = (ROOT / "README.md").read_text().splitlines()
    start = lines.index(header)
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def _results(name: str) -> dict:
    return json.loads((ROOT / "benchmarks" / "results" / name).read_text())


def _pct(x: float) -> str:
    return f"{x:.1f}%"


def _triple(s: dict) -> str:
    """median / bias / p90 as the README prints them: one decimal, the bias signed."""
    return f"{_pct(s['median_ape'])} / {s['median_signed_error']:+.1f}% / {_pct(s['p90_ape'])}"


def _coverage(predicted: int, rows: int) -> str:
    return f"{predicted:,} / {rows:,} ({round(100 * predicted / rows)}%)"


def test_readme_oss_by_metric_table_is_what_the_result_files_hold():
    rows = _table(BY_METRIC)
    assert [(r[0], r[1]) for r in rows] == [(e, c) for e in ("vLLM", "SGLang") for c in SECTIONS]
    for engine, constants, thr, thr_plain, ttft, tpot, e2e in rows:
        part = _results(f"fit-oss-{engine.lower()}-by-metric.json")[SECTIONS[constants]]
        by = part["by_metric"]
        where = (engine, constants)
        assert thr == f"{_triple(by['throughput'])} ({by['throughput']['runs']:.0f})", where
        plain = part["throughput_without_speculative"]
        assert thr_plain == f"{_triple(plain)} ({plain['runs']:.0f})", where
        assert [ttft, tpot, e2e] == [_pct(by[g]["median_ape"]) for g in ("ttft", "tpot_itl", "e2e")], where


def test_readme_accuracy_per_engine_table_is_what_the_result_files_hold():
    """Coverage, the shipped constants on every row and the held-out figures of each engine, against accuracy-dev.json
    / accuracy-cv.json (TensorRT-LLM) and accuracy-oss2-dev.json / fit-oss-*-by-metric.json (vLLM, SGLang)."""
    rows = {r[0].split(" (")[0]: r[1:] for r in _table(PER_ENGINE)}
    assert list(rows) == ["TensorRT-LLM", "vLLM", "SGLang"]
    dev, cv = _results("accuracy-dev.json"), _results("accuracy-cv.json")
    coverage, in_sample, held_out = rows["TensorRT-LLM"]
    assert coverage == _coverage(dev["predicted"], dev["rows"])
    assert in_sample == _triple(dev)
    assert held_out.startswith(_triple(cv["table"]["held_out"]["all"]) + " (by table")
    oss = _results("accuracy-oss2-dev.json")
    for engine in ("vLLM", "SGLang"):
        coverage, in_sample, held_out = rows[engine]
        c = oss["coverage"]["by_engine"][engine.lower()]
        assert coverage == f"{_coverage(c['predicted'], c['rows'])}; {c['runs_predicted']} / {c['runs']} runs", engine
        assert in_sample == _triple(oss["run_weighted"]["by_engine"][engine.lower()]), engine
        by_metric = _results(f"fit-oss-{engine.lower()}-by-metric.json")
        assert held_out.startswith(_triple(by_metric["held_out_by_page"]["by_metric"]["all"]) + " ("), engine


def test_readme_grouped_cv_table_is_what_accuracy_cv_json_holds():
    """The headline TensorRT-LLM table (grouped cross-validation, `accuracy.py --cv`) against accuracy-cv.json, every
    row (its leave-one-source-file-version-out row had stayed at a run from before the CUDA-graph split)."""
    cv = _results("accuracy-cv.json")
    where = {"fitted on all": cv["fitted_on_all"], "leave one table out": cv["table"]["held_out"],
             "leave one model x GPU family out": cv["family"]["held_out"],
             "leave one source file version out": cv["doc_version"]["held_out"]}
    rows = _table("| rows (n) | median abs. error | bias (median signed) | p90 abs. error |")
    for label, median, bias, p90 in rows:
        if label.startswith("footnote"):
            s = cv["hash_split_2fold"]["held_out"]
        else:
            which = "all" if label.startswith("all predicted rows") else "trtllm_throughput_rows"
            s = where[label.split(", ", 1)[1].rsplit(" (", 1)[0]][which]
        assert label.endswith(f"({s['n']:,})"), label
        assert f"{median} / {bias} / {p90}" == _triple(s), label
    assert len(rows) == 9
