"""Planner building blocks checked by hand: workload, queueing, capacity optimum, cost, Pareto, scenarios."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from clusterfit.errors import ClusterfitError
from clusterfit.planning.capacity import PREFILL_LOAD_POINTS, PrefillCapacity, _load_fractions, aggregated_curve
from clusterfit.planning.cost import EndpointPrice, Pool, break_even_rps, parse_price_overrides, usd_per_mtok, verdict
from clusterfit.planning.pareto import pareto_front
from clusterfit.planning.planner import _size_aggregated
from clusterfit.planning.queueing import mean_wait_s, ttft_cdf, ttft_quantile_s
from clusterfit.planning.scenario import load_scenario, parse_scenario
from clusterfit.planning.workload import SLO, AgentSessions, LengthDist, Load, Workload

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


class LinearStep:
    """A fake StepModel: step = 10 ms + 0.1 ms per decode sequence + 0.02 ms per prefill token."""

    def __init__(self):
        self.engine = SimpleNamespace(max_num_batched_tokens=8192)
        self.max_num_seqs = 64
        self.gpus = 8

    def step_s(self, P, A, D, Ad, microbatches=None):
        return 0.010 + 1e-4 * np.asarray(D, float) + 2e-5 * np.asarray(P, float)

    def max_sequences(self, context):
        return 1000.0

    def kv_admitted_sequences(self, prompt, output):
        return 1000.0


def test_hand_computed_optimum():
    # isl 1000, osl 100, no cache: each step carries B*1000/100 = 10B prefill tokens on average, so
    # TPOT(B) = d(B) + B * (prefill step - decode step) / osl = 0.010 + 1e-4 B + B * (2e-5 * 1000) / 100
    #        = 0.010 + 3e-4 B.  TPOT <= 20 ms  =>  B <= 33.3  =>  B* = 33.
    # Capacity = 33 / (100 * (0.010 + 0.0099)) = 16.583 requests/s; 40 requests/s need ceil(2.41) = 3
    # replicas, +1 spare = 4 replicas of 8 GPUs = 32 GPUs on 4 nodes.
    # (judged at the median with no goodput floor: the mean TPOT is the median of the planner's normal spread)
    wl = Workload.simple(1000, 100, Load("requests_per_s", 40))
    slo = SLO(tpot_s=0.020, tpot_percentile=50, min_goodput=0.0)
    sm = LinearStep()
    curve = aggregated_curve(sm, wl, slo, np.arange(1, 65, dtype=float))
    assert curve.tpot_s[32] == pytest.approx(0.010 + 3e-4 * 33)
    cand = SimpleNamespace(agg=curve, gpus=8, system=SimpleNamespace(gpus_per_node=8), precision_name="fp8",
                           kv_dtype="fp8")
    sized = _size_aggregated(cand, wl, 40.0, 1, None)
    assert sized.best_batch == 33
    assert sized.capacity == pytest.approx(33 / (100 * 0.0199))
    assert sized.replicas == 3 and sized.spares == 1
    assert sized.nodes == 4 and sized.gpus == 32
    # operating point: 40/3 = 13.33 req/s per replica -> smallest B with B/(100(0.01+3e-4 B)) >= 13.33:
    # B >= 13.33/(10 - 0.4) ... B (1 - 0.4) >= 13.33 -> B >= 22.2 -> 23
    assert sized.batch == 23


def test_prefill_bound_light_load_runs_the_smallest_batch_below_its_full_rate():
    """isl 8,000, osl 1: batch 1 takes one 0.1701 s step per request (10 ms + 0.1 ms + 8,000 x 0.02 ms), so its own
    full rate is 5.88 requests/s, where the prefill queue (8,000 / 8,191 x 0.17392 s = 0.16986 s a request) is 99.9%
    busy and TTFT p90 is 141 s; larger batches only slow the step. capacity.Underload serves batch 1 below that rate:
    the largest rate of the load grid with TTFT p90 within the 1 s target (4.36 requests/s here)."""
    wl = Workload.simple(8000, 1, Load("requests_per_s", 1))
    c = aggregated_curve(LinearStep(), wl, SLO(ttft_s=1.0, min_goodput=0.0), np.arange(1, 65, dtype=float))
    u = c.underload
    assert c.tpot_s[0] == pytest.approx(0.1701)
    assert u.rate0 == pytest.approx(1 / 0.1701)
    assert float(u.occupancy[0]) == pytest.approx(8000 / 8191 * 0.17392)
    assert float(u.ttft_s(u.rate0)[0]) > 60.0
    assert c.feasible[0] and not c.feasible[1:].any()
    lam = float(c.rate_rps[0])
    assert 0 < lam < u.rate0 and c.ttft_s[0] <= 1.0
    fractions = _load_fractions(PREFILL_LOAD_POINTS)
    i = int(np.argmin(np.abs(fractions * u.rate0 - lam)))
    assert fractions[i] * u.rate0 == pytest.approx(lam)
    assert float(u.ttft_s(fractions[i + 1] * u.rate0)[0]) > 1.0     # the next rate of the grid misses the target
    # a trickle of requests finds the replica idle: TTFT is its own prefill step
    assert float(u.ttft_s(1e-6)[0]) == pytest.approx(0.1701, rel=3e-3)


def test_prefill_pool_ttft_at_the_rate_served_not_at_capacity():
    p = PrefillCapacity(4.0, 0.9, 0.0, 3, load_rps=np.array([1.0, 2.0, 4.0]), load_ttft_s=np.array([0.2, 0.3, 0.9]))
    assert p.ttft_at(1.5) == pytest.approx(0.25)
    assert p.ttft_at(0.5) == pytest.approx(0.2)        # below the rates tried: the lowest one's
    assert p.ttft_at(9.0) == pytest.approx(0.9)        # never beyond capacity
    assert PrefillCapacity(0.0, 7.0, 0.0, 3).ttft_at(1.0) == 7.0


def test_tpot_percentile_spread_by_hand():
    # Same replica. Each prefill adds e = 0.02 s (its chunk step beyond a decode step). A request decoding n = 99
    # tokens meets the prefills that arrive (at B / (100 x 0.0199) requests/s, Little's law) while its 98 later decode
    # steps run at the mean TPOT and while its own chunk step runs before its first (no async scheduling here):
    # 0.010 + 1e-4 B + 0.020 = 0.0333 s at B = 33, so m = B (98 + 0.0333 / 0.0199) / 100 = 32.89 of them, Poisson
    # (above 30: the normal approximation). TPOT = d(B) + e K / n: mean d + e m / n, sd e sqrt(m) / n, p90 = mean +
    # 1.2816 sd.
    wl = Workload.simple(1000, 100, Load("requests_per_s", 40))
    B = np.arange(1, 65, dtype=float)
    p90 = aggregated_curve(LinearStep(), wl, SLO(tpot_s=0.020, min_goodput=0.0), B)
    m = 33 * (98 + 0.0333 / 0.0199) / 100
    assert m == pytest.approx(32.89, abs=0.01)
    assert p90.tpot_s[32] == pytest.approx(0.0199)
    assert p90.tpot_q_s[32] == pytest.approx(0.0133 + 0.02 * m / 99 + 1.2815515655 * 0.02 * math.sqrt(m) / 99,
                                             rel=1e-6)
    assert p90.feasible.sum() < 33  # the p90 target binds at a smaller batch than the mean
    # the goodput floor binds further: P(TPOT <= target) >= 0.9 is the p90 condition itself here (no TTFT target)
    g = aggregated_curve(LinearStep(), wl, SLO(tpot_s=0.020), B)
    assert g.feasible.sum() == p90.feasible.sum()


def test_queue_matches_md1_by_hand():
    # deterministic 0.1 s service, 5 req/s: rho 0.5, P-K mean wait = 5 * 0.01 / (2 * 0.5) = 0.05 s;
    # P(W > x) = 0.5 exp(-10 x) = 0.1 at x = ln 5 / 10; p90 TTFT = 0.1 + 0.1609 s.
    assert mean_wait_s(np.array(5.0), np.array([0.1]), np.array([1.0])) == pytest.approx(0.05)
    q = ttft_quantile_s(0.9, np.array([5.0]), np.array([[0.1]]), np.array([1.0]))
    assert q[0] == pytest.approx(0.1 + math.log(5) / 10)
    # the same through the multi-class bisection (two identical classes)
    q2 = ttft_quantile_s(0.9, np.array([5.0]), np.array([[0.1, 0.1]]), np.array([0.5, 0.5]))
    assert q2[0] == pytest.approx(q[0], rel=1e-6)
    assert np.isinf(ttft_quantile_s(0.9, np.array([10.0]), np.array([[0.1]]), np.array([1.0]))[0])


def test_the_step_an_arrival_finds_running_adds_its_residual():
    """An arrival that finds the replica busy waits out the running step, R ~ Uniform(0, step) (queueing.py)."""
    no_queue = (np.array([0.0]), np.array([[0.05]]), np.array([1.0]))        # no other prefills: W = 0
    # busy for sure: TTFT = 0.05 + R, p90 = 0.05 + 0.9 x 0.01
    assert ttft_quantile_s(0.9, *no_queue, step_s=np.array([0.01]), busy=np.array([1.0]))[0] == \
        pytest.approx(0.059, abs=1e-7)
    # busy half the time: P(R > r) = 0.5 (1 - r / 0.01) = 0.1 at r = 0.008
    assert ttft_quantile_s(0.9, *no_queue, step_s=np.array([0.01]), busy=np.array([0.5]))[0] == \
        pytest.approx(0.058, abs=1e-7)
    # with the M/D/1 queue of test_queue_matches_md1_by_hand: P(W + R > x) = (1/s) int_{x-s}^{x} P(W > y) dy, the
    # closed form against a numerical integral of the same tail at the p90 found
    args, s = (np.array([5.0]), np.array([[0.1]]), np.array([1.0])), 0.02
    q = ttft_quantile_s(0.9, *args, step_s=np.array([s]), busy=np.array([1.0]))[0]
    y = np.linspace(q - 0.1 - s, q - 0.1, 200_001)
    tail = np.where(y < 0, 1.0, 0.5 * np.exp(-10.0 * np.maximum(y, 0.0)))
    assert float(np.mean(tail)) == pytest.approx(0.1, rel=1e-4)
    assert 0.1 + math.log(5) / 10 < q < 0.1 + math.log(5) / 10 + s
    assert ttft_cdf(q, *args, step_s=np.array([s]), busy=np.array([1.0]))[0] == pytest.approx(0.9, rel=1e-6)


def test_length_distributions():
    d = LengthDist.from_percentiles(mean=2000, percentiles={50: 1200, 90: 4500})
    assert d.mean == pytest.approx(2000)
    assert 1000 < d.quantile(0.5) < 1400
    h = LengthDist.from_histogram([100, 1000], [3, 1])
    assert h.mean == pytest.approx(325)
    with pytest.raises(ClusterfitError):
        LengthDist.from_percentiles(percentiles={50: 100, 90: 50})


def test_agent_sessions_prefix_cache():
    a = AgentSessions(shared_prefix_tokens=1000, turns=3, input_tokens_per_turn=100, output_tokens_per_turn=200)
    wl = Workload.agentic(a, Load("concurrent_sessions", 10), prefix_cache_hit_rate=1.0)
    assert wl.isl_tokens.tolist() == [1100, 1400, 1700]
    assert wl.uncached_tokens.tolist() == [100, 100, 100]


def test_cost_and_break_even_by_hand():
    assert usd_per_mtok(36.0, 1000.0) == pytest.approx(10.0)   # 3.6 Mtok/h for $36/h
    # replica: 10 req/s for $100/h, one spare; endpoint $0.01/request = $36/h per req/s.
    # One serving replica covers up to 10 req/s at $200/h: break-even at 200/36 = 5.56 req/s.
    assert break_even_rps([Pool(10, 100, 1)], 0.01) == pytest.approx(200 / 36)
    assert break_even_rps([Pool(10, 100, 0)], 0.001) is None   # endpoint cheaper even at full load
    assert verdict(10, 11) == "cluster" and verdict(12, 11) == "endpoint"
    assert EndpointPrice.parse("in=0.6,out=2.2") == EndpointPrice(0.6, 2.2)
    assert parse_price_overrides(["hgx_h200=3.5"]) == {"hgx_h200": 3.5}
    for bad in ("in=0.6", "x=1,out=2", "in=a,out=1"):
        with pytest.raises(ClusterfitError):
            EndpointPrice.parse(bad)
    with pytest.raises(ClusterfitError):
        parse_price_overrides(["h200=-1"])


def test_pareto_front():
    x = np.array([1, 2, 3, 2, 1, 0.5])
    y = np.array([5, 4, 1, 3, 5, 6])
    assert pareto_front(x, y).tolist() == [5, 0, 1, 2]


def test_examples_load():
    files = sorted(EXAMPLES.glob("*.y*ml")) + sorted(EXAMPLES.glob("*.toml"))
    assert len(files) >= 3
    for f in files:
        sc = load_scenario(f)
        assert sc.to_workload().load.value > 0


@pytest.mark.parametrize("data, field", [
    ({"model": "x", "workload": {"isl": 100, "osl": 10, "load": {}}}, "workload.load"),
    ({"model": "x", "workload": {"isl": {"mean": -1}, "osl": 10, "load": {"requests_per_s": 1}}}, "workload.isl.mean"),
    ({"model": "x", "workload": {"isl": 100, "osl": 10, "load": {"requests_per_s": 1}}, "slo": {"ttft": 1}}, "slo.ttft"),
    ({"model": "x", "workload": {"isl": {"p50": 100, "p90": 50}, "osl": 10, "load": {"requests_per_s": 1}}},
     "workload.isl"),
    ({"workload": {"isl": 100, "osl": 10, "load": {"requests_per_s": 1}}}, "model"),
    ({"model": "x", "workload": {"isl": 100, "osl": 10, "load": {"requests_per_s": 1}},
      "cost": {"prices": {"h200": 0}}}, "cost"),
    ({"model": "x", "workload": {"osl": 10, "load": {"requests_per_s": 1}}}, "workload"),
    ({"model": "x", "systems": [], "workload": {"isl": 100, "osl": 10, "load": {"requests_per_s": 1}}}, "systems"),
    # true is not 1 request/s, and a mapping where only a number goes names the field (it printed nothing)
    ({"model": "x", "workload": {"isl": 100, "osl": 10, "load": {"requests_per_s": True}}},
     "workload.load.requests_per_s"),
    ({"model": "x", "workload": {"isl": 100, "osl": 10, "load": {"requests_per_s": {"a": 1}}}},
     "workload.load.requests_per_s"),
    ({"model": "x", "workload": {"isl": 100, "osl": True, "load": {"requests_per_s": 1}}}, "workload.osl"),
])
def test_scenario_errors_name_the_field(data, field):
    with pytest.raises(ClusterfitError) as exc:
        parse_scenario(data)
    assert f"{field}:" in str(exc.value)


def test_scenario_file_errors(tmp_path):
    bad = tmp_path / "s.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(ClusterfitError, match="not valid YAML"):
        load_scenario(bad)
    with pytest.raises(ClusterfitError, match="not found"):
        load_scenario(tmp_path / "missing.yaml")
    ok = tmp_path / "s.toml"
    ok.write_text('model = "m"\n[workload]\nisl = 10\nosl = 5\nload = {requests_per_s = 2}\n[simulation]\nanything = 1\n')
    assert load_scenario(ok).simulation == {"anything": 1}
    nan = tmp_path / "nan.yaml"
    nan.write_text("model: m\nworkload: {isl: 10, osl: 5, load: {requests_per_s: [1, .nan]}}\n")
    with pytest.raises(ClusterfitError, match=r"workload\.load\.requests_per_s\[1\]: nan is not a finite number"):
        load_scenario(nan)


def test_speed_calibrated_only_for_nvidia():
    from clusterfit.hardware import load_hardware
    from clusterfit.planning.planner import speed_calibrated

    hw = load_hardware()
    assert speed_calibrated(hw.system("h200")) and speed_calibrated(hw.system("gb200_nvl72"))
    assert not speed_calibrated(hw.system("mi300x_platform"))
    assert not speed_calibrated(hw.system("tpu_v6e_host"))


def test_every_catalog_system_is_priced_or_says_why():
    """Each built-in system has a price quote with a source, or an explicit no-public-price note (never a silent '-')."""
    from clusterfit.hardware import load_hardware
    from clusterfit.planning.cost import NO_PUBLIC_PRICE, catalog_prices, no_public_price_notes

    prices, notes = catalog_prices(), no_public_price_notes()
    for gpu in notes:
        assert gpu not in prices, f"{gpu} has both a price and a no-public-price note"
    for sys_id, system in load_hardware().systems.items():
        gpu = system.gpu.id
        if gpu in prices:
            assert prices[gpu].usd_per_gpu_hour > 0 and prices[gpu].source.strip(), sys_id
        else:
            assert notes.get(gpu, "").startswith(NO_PUBLIC_PRICE) and "searched:" in notes[gpu], \
                f"{sys_id} ({gpu}): no price and no no-public-price note"


def test_a_one_class_quantile_inside_the_step_matches_the_integral():
    """Light queue, long step: the p90 falls inside the step the arrival finds, where the one-class solver runs
    Newton's method; its tail there equals the numerical integral of the model (queueing.py)."""
    rate, service, s = 0.5, 0.1, 0.5        # rho 0.05, P-K mean wait 0.5 x 0.01 / (2 x 0.95)
    args = (np.array([rate]), np.array([[service]]), np.array([1.0]))
    q = ttft_quantile_s(0.9, *args, step_s=np.array([s]), busy=np.array([0.9]))[0]
    assert 0.1 < q < 0.1 + s
    wbar = rate * service ** 2 / (2 * (1 - rate * service))
    y = np.linspace(q - 0.1 - s, q - 0.1, 400_001)
    wait_tail = np.where(y < 0, 1.0, 0.05 * np.exp(-0.05 / wbar * np.maximum(y, 0.0)))
    at_q = 0.1 * (0.05 * math.exp(-0.05 / wbar * (q - 0.1))) + 0.9 * float(np.mean(wait_tail))
    assert at_q == pytest.approx(0.1, rel=1e-4)


def test_a_price_takes_the_names_system_takes(run_json):
    """--price h200=3 said "unknown system 'h200'" while --system h200 works: an alias is read as its id."""
    out = run_json("plan", "llama-3.1-8b", "--isl", "100", "--osl", "10", "--rate", "1", "--system", "h200",
                   "--price", "h200=3")
    assert out["per_system"][0]["price_per_gpu_hour"] == 3.0


def test_an_unknown_load_kind_is_named_before_its_bound_is_looked_up():
    """Load checked its kind's upper bound first: an unknown kind raised KeyError, not the error naming it."""
    from clusterfit.errors import ClusterfitError
    from clusterfit.planning.workload import Load

    with pytest.raises(ClusterfitError, match="unknown load kind 'tokens_per_day'"):
        Load("tokens_per_day", 5.0)  # type: ignore[arg-type]


@pytest.mark.parametrize("options, says", [
    (("--isl", "500"), "--isl: scenario file {f} has an agent section (workload.agent)"),
    (("--osl", "50"), "--osl: scenario file {f} has an agent section"),
    (("--isl", "500", "--osl", "50"), "drop --isl and --osl"),
])
def test_length_options_do_not_silently_replace_an_agent_section(run_cli, options, says):
    """plan planned ISL 500 and dropped the agent section, which the scenario itself refuses beside isl / osl."""
    f = EXAMPLES / "agent-sessions.yaml"
    code, out, err = run_cli("plan", "--scenario", str(f), "--system", "h200", *options)
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ") and says.format(f=f) in err, err


@pytest.mark.parametrize("budget", ["--nodes", "--gpus"])
def test_a_capacity_budget_does_not_silently_drop_a_scenario_load(run_cli, budget):
    """A budget answers the load it carries: the scenario's load was dropped (on the command line --rate with
    --nodes is refused)."""
    f = EXAMPLES / "chat-lognormal.yaml"
    code, out, err = run_cli("plan", "--scenario", str(f), "--system", "h200", budget, "1")
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: {budget}: capacity mode") and "(workload.load)" in err, err


def test_an_unknown_scenario_price_names_the_scenario_field(run_cli, run_json, tmp_path):
    """A scenario's cost.prices with an unknown system said '--price: unknown system', an option not given."""
    f = tmp_path / "s.yaml"
    base = "model: llama-3.1-8b\nworkload: {isl: 100, osl: 10, load: {requests_per_s: 1}}\n"
    f.write_text(base + "cost: {prices: {nonexistent_sys: 2.0}}\n")
    code, out, err = run_cli("plan", "--scenario", str(f), "--system", "h200")
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: scenario file {f}: cost.prices.nonexistent_sys: unknown system "), err
    f.write_text(base + "cost: {prices: {h200: 2.0}}\n")   # an alias, as --price takes; the option still wins
    assert run_json("plan", "--scenario", str(f), "--system", "h200")["per_system"][0]["price_per_gpu_hour"] == 2.0
    out = run_json("plan", "--scenario", str(f), "--system", "h200", "--price", "hgx_h200=3")
    assert out["per_system"][0]["price_per_gpu_hour"] == 3.0


def test_a_scenario_ttft_percentile_survives_a_target_option(run_cli, tmp_path):
    """--tpot-ms over a scenario whose slo says ttft_percentile 99 kept the targets but judged TTFT at p90 (the
    option's default replaced the scenario's percentile); --ttft-percentile given still wins."""
    f = tmp_path / "s.yaml"
    f.write_text("model: meta-llama/Llama-3.1-8B\nsystems: [hgx_h200]\n"
                 "workload: {isl: 1000, osl: 200, load: {requests_per_s: 5}}\n"
                 "slo: {ttft_ms: 1000, ttft_percentile: 99}\n")
    code, out, err = run_cli("plan", "--scenario", str(f), "--tpot-ms", "50", "--json")
    assert code == 0 and json.loads(out)["slo"].startswith("TTFT p99 <= 1000 ms, TPOT p90 <= 50 ms"), err
    code, out, err = run_cli("plan", "--scenario", str(f), "--tpot-ms", "50", "--ttft-percentile", "95", "--json")
    assert code == 0 and json.loads(out)["slo"].startswith("TTFT p95 <= 1000 ms"), err


@pytest.mark.parametrize("gpus, k, g, fit, spares, serving", [
    (12, 1, 2, 6, 4, 2),     # 8 + 4 GPUs: TP2 replicas 4 + 2; a node loss takes 4, so 2 serve (the old rule: 0)
    (12, 1, 1, 12, 8, 4),    # TP1: 8 + 4 replicas; losing the full node leaves the 4
    (9, 1, 1, 9, 8, 1),      # the smallest GPU budget keeping one TP1 replica serving beside a node of spares
    (20, 2, 2, 10, 8, 2),    # 4 + 4 + 2 TP2 replicas; N+2 loses the two full nodes
    (16, 1, 2, 8, 4, 4),     # whole nodes: (nodes - k) x replicas per node, as before
    (16, 1, 16, 1, 1, 0),    # a 16-GPU replica on two 8-GPU nodes: its spare leaves none serving
    (12, 2, 1, 12, 16, 0),   # N+2 with two nodes: none serves (not a negative count)
])
def test_one_packing_rule_for_budgets_and_headroom(gpus, k, g, fit, spares, serving):
    """The headroom's rule (planner's serving_within) and capacity mode's (budget._serving) were two implementations
    that disagreed on budgets that are not whole nodes: 12 GPUs of 8-GPU nodes rented per node, TP2, N+1 gave 0
    serving replicas in one, 2 in the other. N+k survives the loss of the k fullest nodes, and a part-filled node
    holds serving replicas too (by hand in the cases). Both were replaced by planner.packed_with_spares."""
    from clusterfit.planning.planner import packed_with_spares

    assert packed_with_spares(gpus, k, g, 8, None) == (fit, spares, serving)
    assert packed_with_spares(gpus, k, g, 8, None)[2] == serving


def test_a_budget_of_part_of_a_node_packs_by_the_one_rule(run_json, run_cli):
    """Through the CLI, mi300x_platform (8 GPUs a node, rented per node, so a node is the failure unit) with N+1:
    12 GPUs hold 6 TP2 replicas, 4 of them spares (a full node's worth), 2 serving; the headroom counts the 16 GPUs
    rented (whole nodes), 8 TP2 replicas of which 4 serve: twice the load the 12-GPU budget carries. 8 GPUs hold no
    serving replica, and the answer names the smallest budget that does: 9 GPUs (8 TP1 spares on the full node,
    1 serving beside them)."""
    load = ("meta-llama/Llama-3.1-8B-Instruct", "--system", "mi300x", "--isl", "1000", "--osl", "200", "--ttft-ms",
            "1000", "--tpot-ms", "40", "--failover", "1", "--no-disagg")
    rec = run_json("plan", *load, "--gpus", "12")["recommended"]
    assert (rec["layout"], rec["replicas"], rec["spare_replicas"], rec["serving_replicas"]) == ("TP2", 6, 4, 2)
    assert rec["rented_gpus"] == 16
    assert rec["headroom_requests_per_s"] == pytest.approx(2 * rec["requests_per_s"])
    code, out, _ = run_cli("plan", *load, "--gpus", "8")
    assert code == 0 and "the smallest budget that keeps a replica serving is 9 GPU(s) (TP1: 1 serving + 8 spare)" in \
        " ".join(out.split())


def test_tpot_percentile_of_answers_most_of_which_no_prefill_reaches():
    """2-token answers (n = 1 decode step each): chunk steps landing on a request's decode are Poisson of mean
    B x 1 / 2. At B = 0.1 a request sees none with probability exp(-0.05) = 0.951 >= 0.9, so TPOT p90 is the plain
    5 ms decode step (the normal approximation said 5 + 0.1 x 20 / 2 + 1.2816 x sqrt(0.1 x 0.02^2 / 2) = 11.7 ms),
    and P(TPOT <= 50 ms) >= 0.951. At B = 1, exp(-0.5) = 0.607 < 0.9, but one chunk step at most has probability
    1.5 exp(-0.5) = 0.910: TPOT p90 is 5 + 20 = 25 ms, the scaled Poisson's (exact here: every extra is 20 ms), where
    the normal approximation said 15 + 1.2816 x sqrt(0.02^2 / 2) = 33.1 ms; P(TPOT <= 50 ms) = P(at most two) =
    exp(-0.5) (1 + 0.5 + 0.125) = 0.986."""
    from clusterfit.planning.capacity import tpot_spread

    wl = Workload.simple(1000, 2, Load("requests_per_s", 5))
    B = np.array([0.1, 1.0])
    mean, sd, judged, p_ok = tpot_spread(B, np.full(2, 0.005), np.full(2, 0.02), np.full(2, 0.02**2), wl,
                                         SLO(tpot_s=0.05))
    assert mean.tolist() == pytest.approx([0.006, 0.015])
    assert sd.tolist() == pytest.approx([math.sqrt(0.1 * 0.02**2 / 2), math.sqrt(0.02**2 / 2)])
    assert judged.tolist() == pytest.approx([0.005, 0.025])
    assert p_ok[0] >= math.exp(-0.05) and p_ok[1] == pytest.approx(math.exp(-0.5) * 1.625)


def test_the_scaled_poisson_quantile_is_the_same_found_directly_or_by_bisection():
    """capacity.tpot_scaled_poisson finds the first value d + c k / n_j where the mixture CDF reaches q among all of
    them (few classes) or by bisection (length histograms of many bins): both give the same TPOT and P(TPOT <=
    target) on 16 log-normal output classes, each split in two as tpot_spread does."""
    from clusterfit.planning.capacity import FEW_CHUNKS, tpot_scaled_poisson

    rng = np.random.default_rng(3)
    osl = LengthDist.from_percentiles(mean=120, percentiles={50: 60, 90: 300})
    n = np.concatenate([np.maximum(osl.tokens - 1, 1)] * 2)
    rows = 40
    share = rng.uniform(0, 1, (rows, 1))
    w = np.concatenate([osl.weights * share, osl.weights * (1 - share)], axis=1)
    m = rng.uniform(0.01, 0.1, (rows, 1)) * n * rng.uniform(0.5, 2.0, (rows, n.size))
    m *= np.minimum(1.0, FEW_CHUNKS / m.max(axis=1))[:, None]      # where tpot_spread takes it
    d, e1 = rng.uniform(0.004, 0.02, rows), rng.uniform(0.005, 0.05, rows)
    e2 = e1 * e1 * rng.uniform(1.0, 2.0, rows)
    a = tpot_scaled_poisson(m, d, e1, e2, n, w, 0.9, 0.05, direct=True)
    b = tpot_scaled_poisson(m, d, e1, e2, n, w, 0.9, 0.05, direct=False)
    assert np.all(a[0] >= d) and np.any(a[0] > d)
    assert a[0] == pytest.approx(b[0], rel=1e-9) and a[1] == pytest.approx(b[1], rel=1e-12)


@pytest.mark.parametrize("k, g, node, per_gpu, step, gpus", [
    (1, 1, 8, False, 1, 9),     # a node of 8 spares (a node is the failure unit) and one serving replica
    (1, 2, 8, False, 1, 10),    # 4 TP2 spares on a node, one TP2 replica beside it
    (1, 1, 8, False, 8, 16),    # a budget of nodes: 2
    (2, 4, 8, False, 1, 20),    # two nodes of TP4 spares, one TP4 replica
    (1, 1, 8, True, 1, 2),      # rented per GPU: one spare GPU beside the serving one
    (1, 3, 4, True, 1, 7),      # 3-GPU replicas on 4-GPU nodes: one on a node, the second's 3 GPUs on the next
    (1, 16, 8, False, 1, 32),   # a 16-GPU replica and its spare: 4 nodes
    (1, 8, 8, False, 1, 16),
])
def test_smallest_budget_keeping_a_replica_serving(k, g, node, per_gpu, step, gpus):
    """planner.smallest_serving_budget by hand, and the budget it names does keep a replica serving while one GPU
    (or node) less does not."""
    from clusterfit.planning.planner import packed_with_spares, smallest_serving_budget

    price = SimpleNamespace(rent_unit="gpu") if per_gpu else None
    assert smallest_serving_budget(k, g, node, price, step) == gpus
    assert packed_with_spares(gpus, k, g, node, price)[2] >= 1
    assert packed_with_spares(gpus - step, k, g, node, price)[2] == 0


def test_without_mixed_batches_a_prefill_step_delays_every_decode():
    """LinearStep's engine without mixed batches (SGLang): a prompt's 1,000 tokens run in a prefill step of its own
    (0.010 + 0.02 = 0.030 s, no decode in it, its budget all the prompts') during which the B decodes gain nothing,
    so TPOT(B) = d(B) + B x 0.030 / 100 = 0.010 + 1e-4 B + 3e-4 B = 0.010 + 4e-4 B: 0.0232 s at B = 33 (mixed, as
    test_hand_computed_optimum: the chunk rides a step with the decodes and only its 0.020 s beyond it counts,
    0.0199 s). Its TTFT holds the prompt alone, 0.030 s of own prefill."""
    wl = Workload.simple(1000, 100, Load("requests_per_s", 40))
    slo = SLO(tpot_s=0.020, tpot_percentile=50, min_goodput=0.0)
    sm = LinearStep()
    sm.engine = SimpleNamespace(max_num_batched_tokens=8192, mixed_batches=False)
    curve = aggregated_curve(sm, wl, slo, np.arange(1, 65, dtype=float))
    assert curve.tpot_s[32] == pytest.approx(0.010 + 4e-4 * 33)
    assert curve.underload is not None and curve.underload.own.tolist() == pytest.approx([0.030])



def test_curves_finished_together_are_the_curves_finished_alone():
    """The search's pending_and_prefill (one step_s call for a layout's aggregated and prefill steps where PP is 1),
    then finish_curves and finish_prefills (the TTFT quantiles, mean waits and P(TTFT <= target) of every one-class
    curve and prefill capacity computed together, one queueing call each): each answer (and its point answer under
    --confidence 80) is bit for bit what aggregated_curve and prefill_capacity give alone, for DeepSeek-V3 layouts on
    H200 under vLLM and SGLang (one with PP) and a two-class workload finished beside them."""
    from clusterfit.arch import load_model
    from clusterfit.compose import Catalog, build_replica
    from clusterfit.intervals import bands_for, step_margins
    from clusterfit.perfmodel.comm import links_for
    from clusterfit.planning.capacity import (batch_grid, finish_curves, finish_prefills, pending_and_prefill,
                                              prefill_capacity)

    one = Workload.simple(4096, 1024, Load("requests_per_s", 5))
    two = Workload(LengthDist(np.array([500.0, 3000.0]), np.array([0.7, 0.3])), LengthDist.fixed(400),
                   Load("requests_per_s", 5))
    slo = SLO(ttft_s=2.0, tpot_s=0.05)
    catalog, model = Catalog.load(), load_model("deepseek-ai/DeepSeek-V3")
    kv_link = links_for(catalog.hardware.system("h200"))[0]
    jobs = []
    for engine, layout in (("vllm", dict(tp=8)), ("vllm", dict(tp=1, dp=8, ep=8)), ("sglang", dict(tp=8, ep=8)),
                           ("vllm", dict(tp=8, pp=2))):
        sm = build_replica(catalog, model, "h200", engine=engine, **layout).step
        for wl in (one, two):
            for margins in (None, step_margins(bands_for(engine, "h200", model), 80)):
                jobs.append((sm, wl, batch_grid(sm.max_num_seqs), margins))
    pending = [pending_and_prefill(sm, wl, slo, grid, kv_link, margins) for sm, wl, grid, margins in jobs]
    curves, prefills = finish_curves([c for c, _ in pending]), finish_prefills([p for _, p in pending])
    for curve, prefill, (sm, wl, grid, margins) in zip(curves, prefills, jobs):
        alone = aggregated_curve(sm, wl, slo, grid, margins), prefill_capacity(sm, wl, slo, kv_link, margins)
        pairs = [(curve, alone[0]), (prefill, alone[1])]
        pairs += [(curve.point, alone[0].point), (prefill.point, alone[1].point)] if margins is not None else []
        for a, b in pairs:
            for name, value in vars(b).items():
                if isinstance(value, (np.ndarray, float)):
                    assert np.array_equal(getattr(a, name), value), name


@pytest.mark.parametrize("scenario_price, option, billed, source", [
    ("{hgx_h200: 4}", (), 4.0, "the scenario's cost.prices"),
    ("{hgx_h200: 4}", ("--price", "h200=3"), 3.0, "--price"),       # the option prices the system's GPU
    ("{hgx_h200: 4}", ("--price", "hgx_h200=3"), 3.0, "--price"),   # the same id
    ("{h200: 4}", ("--price", "hgx_h200=3"), 3.0, "--price"),       # the option prices the system, the scenario its GPU
])
def test_an_option_price_wins_over_the_scenarios_and_the_label_says_which(run_cli, tmp_path, scenario_price, option,
                                                                        billed, source):
    """A scenario's cost.prices {hgx_h200: 4} with --price h200=3 billed $4 while the label said '--price': the two
    were checked apart, and hgx_h200's own price beat its GPU's. Options win for every system they price; the label
    names where the price billed came from. hgx_h200 rents per GPU (the catalog quote's unit): one GPU at $3/GPU-hour
    is $3/hour."""
    import json

    f = tmp_path / "s.yaml"
    f.write_text("model: llama-3.1-8b\nsystems: [hgx_h200]\nworkload:\n  isl: 1000\n  osl: 200\n"
                 f"  load: {{requests_per_s: 2}}\nslo: {{tpot_ms: 50}}\ncost: {{prices: {scenario_price}}}\n")
    code, out, err = run_cli("plan", "--scenario", str(f), *option, "--json")
    assert code == 0, err
    row = json.loads(out)["per_system"][0]
    assert row["system"] == "hgx_h200" and row["total_gpus"] == 1
    assert row["cost_per_hour"] == pytest.approx(billed)
    assert f"user override ({source}; " in row["price_source"], row["price_source"]


def test_one_check_refuses_a_price_given_twice_by_the_id_it_resolves_to():
    """parse_price_overrides keys prices by catalog id, through the one check that refuses a system priced twice
    (before, a name repeated in another case was refused by a second check with its own message)."""
    assert parse_price_overrides(["h200=3"]) == {"h200_sxm": 3.0}
    with pytest.raises(ClusterfitError, match=r"^prices: h200 is priced twice \(h200=3 and H200=4\)$"):
        parse_price_overrides(["h200=3", "H200=4"])
    with pytest.raises(ClusterfitError, match=r"^prices: h200_sxm is priced twice \(h200=3 and H200-SXM=4\)$"):
        parse_price_overrides(["h200=3", "H200-SXM=4"])


def test_resolve_systems_refuses_one_system_named_twice():
    """planner.resolve_systems goes through compose.Catalog.distinct_systems: a second name of one system is refused
    (it was dropped silently, a branch no caller reached once plan checked names first)."""
    from clusterfit.compose import Catalog
    from clusterfit.errors import ParameterError
    from clusterfit.planning.planner import resolve_systems

    catalog = Catalog.load()
    assert [s.id for s in resolve_systems(["h200"], catalog)] == ["hgx_h200"]
    assert len(resolve_systems(None, catalog)) == len(catalog.hardware.systems)
    with pytest.raises(ParameterError, match=r"hgx_h200 is given twice \(as 'h200' and 'hgx_h200'\)"):
        resolve_systems(["h200", "hgx_h200"], catalog)
