"""Plan and simulate tell the same story: every bundled example's recommendation holds its SLOs when the
simulator replays it (``plan --scenario F --verify``), judged at the percentiles the scenario asks for."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterfit import api

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.*"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_plan_holds_in_simulation(path):
    result = api.plan(scenario=path, verify=True, verify_requests=3000)
    v = result.verify
    assert v is not None and v.simulated, v and v.reason
    assert v.verdict is not None and v.slo is not None
    print(f"{path.name}: {v.mode}, {v.requests} requests: {v.verdict.text}")
    assert v.verdict.ttft_percentile == v.slo.ttft_percentile
    assert v.verdict.tpot_percentile == v.slo.tpot_percentile == 90
    assert v.verdict.min_goodput == 0.9
    assert v.holds_slo, v.verdict.text
    # the plan's own percentiles meet the targets too, and each disagreement names a figure and a reason
    rec = result.recommended
    assert rec is not None and v.plan_predicted is not None
    assert v.plan_predicted.tpot_s == rec.tpot_s
    for d in v.disagreements or []:
        assert abs(d.ratio - 1) > 0.10 and d.why


def test_examples_are_all_there():
    assert len(EXAMPLES) == 4
