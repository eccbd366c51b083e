"""The labels of the CLI's tables say the unit and the scope of each figure (a units/naming audit: per replica or
all replicas, one GPU of a system or the whole node, the engines' own setting names). Each test runs the real entry
point and checks the label beside the figure --json gives."""

from __future__ import annotations

import re

import pytest

PERF = ("perf", "llama-3.1-8b", "--system", "h200", "--isl", "1000", "--osl", "200", "--max-throughput")


@pytest.fixture(autouse=True)
def wide(monkeypatch):
    """A terminal wide enough that rich wraps no label or caption."""
    monkeypatch.setenv("COLUMNS", "250")


def _row(out: str, label: str) -> str:
    """The value cell of the table row labelled ``label``."""
    for line in out.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃]", line) if c.strip()]
        if cells and cells[0] == label:
            return cells[-1]
    raise AssertionError(f"no row {label!r} in\n{out}")


def test_perf_title_counts_gpus_of_the_system_and_kv_capacity_is_per_replica(run_cli, run_json):
    """'on 1 x hgx_h200 GPUs' read as one 8-GPU node; the replica is 1 GPU (2 for the 70B at TP2) of it. The KV
    capacity is the replica's, with thousands separators; the breakdown's kinds are in the ms column without the
    JSON keys' _s."""
    code, out, _ = run_cli(*PERF)
    assert code == 0
    assert "Llama-3.1-8B on 1 GPU of hgx_h200 (TP1, vllm" in out and " x hgx_h200 GPUs" not in out
    kv = run_json(*PERF)["kv_capacity_tokens"]
    assert _row(out, "KV capacity per replica (tokens)") == f"{int(kv):,}"
    for kind in ("compute", "memory", "communication", "overhead"):
        _row(out, kind)
        assert f" {kind}_s " not in out
    code, out, _ = run_cli("perf", "llama-3.1-70b", "--system", "h200", "--tp", "2", "--isl", "1000", "--osl", "200",
                           "--concurrency", "8")
    assert code == 0 and "Llama-3.1-70B on 2 GPUs of hgx_h200 (TP2, vllm" in out
