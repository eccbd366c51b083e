"""Defects a fuzzing pass found in plan and deploy: price overrides, attention-DP chunk sizes, headroom and capacity
mode under failover, one-token outputs."""

from __future__ import annotations

from pathlib import Path

import clusterfit as cf

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

LLAMA_20 = ("plan", "llama-3.1-8b", "--isl", "1000", "--osl", "200", "--rate", "20", "--ttft-ms", "1000",
            "--tpot-ms", "40", "--system", "h200", "--system", "h100")


def test_price_override_keeps_the_catalog_rent_unit(run_json):
    """--price hgx_h200=2.25 (the catalog's own per-GPU price) switched hgx_h200 to whole nodes: TP2 on a rented
    8-GPU node at $18.00/h, and dgx_h100 recommended; without it, TP1 on 1 GPU at $2.25/h."""
    plain = run_json(*LLAMA_20)
    priced = run_json(*LLAMA_20, "--price", "hgx_h200=2.25")
    for d in (plain, priced):
        rec = d["recommended"]
        assert rec["system"] == "hgx_h200" and rec["rent_unit"] == "gpu", rec
        assert rec["layout"] == "TP1" and rec["rented_gpus"] == 1 and rec["cost_per_hour"] == 2.25
    assert "user override" in priced["recommended"]["price_source"]
    # a price by GPU id or a scenario's cost.prices takes the same way
    by_gpu = run_json(*LLAMA_20, "--price", "h200_sxm=2.0")["recommended"]
    assert by_gpu["system"] == "hgx_h200" and by_gpu["rent_unit"] == "gpu" and by_gpu["cost_per_hour"] == 2.0


def test_price_override_without_a_catalog_quote_rents_whole_nodes(run_json):
    rec = run_json("plan", "llama-3.1-8b", "--isl", "1000", "--osl", "200", "--rate", "20", "--ttft-ms", "1000",
                   "--tpot-ms", "40", "--system", "h200_nvl_8x", "--price", "h200_nvl_8x=3.0")["recommended"]
    assert rec["rent_unit"] == "node" and rec["rented_gpus"] == 8 * rec["nodes"]
    assert "whole nodes" in rec["price_source"]


def test_scenario_price_at_the_catalog_value_changes_nothing(tmp_path, run_json):
    """examples/chat-lognormal.yaml prices dgx_h100 at its catalog $2.49: that made dgx_h100 whole-node rented
    (12 x TP4, 48 GPUs, $119.52/h) against 40 GPUs at $99.60/h without the line."""
    src = EXAMPLES / "chat-lognormal.yaml"
    text = src.read_text()
    assert "prices: {dgx_h100: 2.49}" in text
    bare = tmp_path / "chat.yaml"
    bare.write_text(text.replace("  prices: {dgx_h100: 2.49}\n", ""))
    rows = [{r["system"]: (r["layout"], r["mode"], r["replicas"], r["rented_gpus"], r["rent_unit"],
                           round(r["cost_per_hour"], 6)) for r in run_json("plan", "--scenario", str(f))["per_system"]}
            for f in (src, bare)]
    assert rows[0] == rows[1]
    assert rows[0]["dgx_h100"][4] == "gpu"
