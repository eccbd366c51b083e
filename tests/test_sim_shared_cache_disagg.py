"""The planner's assumptions in the simulator: a prefix-cache hit rate warm on every replica, disaggregated
prefill / decode pools with a KV transfer, and the SLO verdict at the percentiles asked."""

from __future__ import annotations

import numpy as np
import pytest
from test_sim_helpers import RooflineStep

from clusterfit.planning.workload import Load, Workload
from clusterfit.sim import SimulationConfig, run_simulation
from clusterfit.sim.api import build_requests
from clusterfit.sim.disagg import run_disaggregated
from clusterfit.sim.ledger import COMPLETED
from clusterfit.sim.metrics import summarize


def _reqs(hit, n=2000):
    wl = Workload.simple(2000, 100, Load("requests_per_s", 20), prefix_cache_hit_rate=hit)
    return build_requests(SimulationConfig(requests=n, seed=3), wl)


def test_hit_rate_is_the_share_of_prompt_tokens_served_from_cache():
    r = _reqs(0.3)
    assert r.cached_tokens is not None and np.all(r.cached_tokens == 600)
    assert _reqs(0.0).cached_tokens is None
    # the cached share shortens prefill: TTFT falls, everything completes
    base = summarize(run_simulation(_reqs(0.0), RooflineStep(), SimulationConfig(replicas=2)))
    hit = summarize(run_simulation(_reqs(0.3), RooflineStep(), SimulationConfig(replicas=2)))
    assert hit["completed"] == base["completed"] == 2000
    assert hit["ttft_s"]["p50"] < base["ttft_s"]["p50"]


def test_disaggregated_pools_conserve_requests_and_add_the_transfer():
    r = _reqs(0.0)
    run = run_disaggregated(r, RooflineStep(), RooflineStep(), SimulationConfig(), 2, 2,
                            lambda tok: 0.05 + 0 * np.asarray(tok, float))
    req = run.requests
    assert np.all(req["status"] == COMPLETED)
    assert np.all(req["first_token_s"] - req["arrival_s"] >= 0.05)  # the KV transfer is in TTFT
    assert np.all(req["finish_s"] > req["first_token_s"])
    assert run.config.replicas == 4 and run.extra["pools"]["decode_replicas"] == 2
    rep = summarize(run, 1.0, 0.2)
    assert rep["holds_slo"] is not None and rep["verdict"]["text"].startswith("TTFT p90")


def test_verdict_judges_the_percentiles_asked():
    run = run_simulation(_reqs(0.0), RooflineStep(), SimulationConfig(replicas=2))
    rep = summarize(run, 10.0, 1.0, ttft_percentile=99, tpot_percentile=90, min_goodput=0.9)
    v = rep["verdict"]
    assert v["ttft_percentile"] == 99 and v["tpot_percentile"] == 90 and v["min_goodput"] == 0.9
    assert v["ttft_s"] == rep["ttft_s"]["p99"] and v["tpot_s"] == rep["tpot_s"]["p90"]
    tight = summarize(run, 10.0, float(rep["tpot_s"]["p50"]), tpot_percentile=90)
    assert tight["holds_slo"] is False and "TPOT p90" in tight["verdict"]["text"]


def test_a_handoff_token_runs_as_a_decode_token():
    """A request handed to the decode pool has its prompt's KV and one token left to compute: the engines run a
    query-length-1 request with the decodes (vLLM's MLA through the absorbed decode kernel, not the prefill path
    that up-projects 14k cached latents, ~8 ms per step on 8 B200s). One DeepSeek-V3 request of 14,000 + 5 tokens:
    its 4 decode-side steps are decode steps of batch 1 at contexts 14,001..14,004, exactly (exact_steps)."""
    from clusterfit import api
    from clusterfit.compose import Catalog
    from clusterfit.sim.requests import Requests

    sm = api.build_replica(Catalog.load(), "deepseek-ai/DeepSeek-V3", "dgx_b200", tp=1, dp=8, ep=8).step
    isl, osl = 14_000, 5
    reqs = Requests.build([0.0], [isl], [osl])
    run = run_disaggregated(reqs, sm, sm, SimulationConfig(exact_steps=True), 1, 1, lambda tok: 0.0 * np.asarray(tok))
    req = run.requests
    decode_side = float(req["finish_s"][0] - req["first_token_s"][0])
    expected = sum(float(sm.decode_step_s(1, isl + j)) for j in range(1, osl))
    assert decode_side == pytest.approx(expected, rel=1e-9)
    # the prefill path would have charged the first of those steps its cached-latent up-projection
    assert float(sm.step_s(1, isl + 1, 0, 0)) > 1.5 * float(sm.decode_step_s(1, isl + 1))


def test_sglang_runs_prefill_and_decode_in_separate_steps():
    """SGLang does not mix prefill chunks and decode tokens in one batch unless --enable-mixed-chunk (off by default,
    Engine.mixed_batches False): a prefill step holds the running decodes back. 10 ms steps; A (10 + 20 tokens)
    arrives at 0, B (100 + 2) at 0.105 s, during A's decode. Mixed (vLLM), A's 20 tokens take 20 steps whatever B
    does: done at 0.20 s. Separate (SGLang), B's prefill step advances nobody else: A is done at 0.21 s. B's first
    token comes at the end of its prefill step, 0.12 s, either way. Inter-token gaps (ITL): A's 19 and B's 1, all
    10 ms when mixed; separate, A's gap across B's prefill step is 20 ms (B's own first gap stays 10 ms), so the
    mean is (18 x 10 + 20 + 10) / 20 = 10.5 ms and the median 10 ms."""
    from types import SimpleNamespace

    from test_sim_helpers import ConstantStep

    from clusterfit.sim.requests import Requests

    for mixed, a_done, itl_mean in ((True, 0.20, 0.010), (False, 0.21, 0.0105)):
        model = ConstantStep(0.01, max_num_seqs=8)
        model.engine = SimpleNamespace(mixed_batches=mixed)  # type: ignore[attr-defined]
        run = run_simulation(Requests.build([0.0, 0.105], [10, 100], [20, 2]), model, SimulationConfig(exact_steps=True))
        req = run.requests
        assert req["finish_s"][0] == pytest.approx(a_done)
        assert req["first_token_s"][1] == pytest.approx(0.12)
        gaps = run.token_gaps
        assert gaps.weight == 20 and gaps.total_s / gaps.weight == pytest.approx(itl_mean)
        assert gaps.summary((50, 99)) == {"p50": pytest.approx(0.010, rel=0.003), "mean": pytest.approx(itl_mean),
                                          "p99": pytest.approx(0.020 if not mixed else 0.010, rel=0.003)}


def test_sglang_decode_pool_runs_a_handoff_with_the_decodes():
    """A disaggregated decode replica under SGLang: the hand-off arrives with its prompt KV, gets a 'prebuilt' batch
    with no forward pass and is merged into the running batch, which decodes in the same scheduler iteration
    (python/sglang/srt/disaggregation/decode.py, get_next_disagg_decode_batch_to_run). 10 ms steps, no transfer
    time. A (10 + 21 tokens) arrives at 0: prefilled by 0.01 s, then 20 decode-side steps, done at 0.21 s. B (100 + 2)
    arrives at 0.105 s: prefilled by 0.115 s, joins at A's step boundary 0.12 s and finishes at 0.13 s. Before, the
    simulator ran B's hand-off as a prefill step of its own that held A back: A done at 0.22 s. The same requests on
    an aggregated SGLang replica still hold A back for B's prefill step (the test above)."""
    from types import SimpleNamespace

    from test_sim_helpers import ConstantStep

    from clusterfit.sim.requests import Requests

    model = ConstantStep(0.01, max_num_seqs=8)
    model.engine = SimpleNamespace(mixed_batches=False)  # type: ignore[attr-defined]
    reqs = Requests.build([0.0, 0.105], [10, 100], [21, 2])
    run = run_disaggregated(reqs, model, model, SimulationConfig(exact_steps=True), 1, 1,
                            lambda tok: 0.0 * np.asarray(tok, float))
    req = run.requests
    assert req["first_token_s"].tolist() == pytest.approx([0.01, 0.115])
    assert req["finish_s"].tolist() == pytest.approx([0.21, 0.13])


def test_multi_step_scheduling_admits_new_requests_between_step_groups():
    """vLLM V0 multi-step scheduling (--num-scheduler-steps N, Engine.num_scheduler_steps) calls the scheduler once
    per group of N decode steps, so an arrival waits for its group's end before its prefill (vllm-project/vllm#6854).
    10 ms steps; A (10 + 40 tokens) arrives at 0 and its prefill step ends at 0.01 s, when its decode segment starts;
    B (100 + 2) arrives at 0.035 s, in the segment's 3rd step (0.03-0.04 s). One step per call: B's prefill step
    runs 0.04-0.05 s, its first token at 0.05 s. Ten steps per call: the group of steps 1-10 ends at 0.11 s, B's
    prefill runs 0.11-0.12 s, first token at 0.12 s; A loses nothing (mixed steps: its first token at 0.01 s, the
    other 39 one per step, done at 0.40 s). B's second token comes one step after its first either way."""
    from types import SimpleNamespace

    from test_sim_helpers import ConstantStep

    from clusterfit.sim.requests import Requests

    for steps, b_first in ((1, 0.05), (10, 0.12)):
        model = ConstantStep(0.01, max_num_seqs=8)
        model.engine = SimpleNamespace(mixed_batches=True, num_scheduler_steps=steps)  # type: ignore[attr-defined]
        run = run_simulation(Requests.build([0.0, 0.035], [10, 100], [40, 2]), model, SimulationConfig(exact_steps=True))
        req = run.requests
        assert req["first_token_s"][0] == pytest.approx(0.01)
        assert req["first_token_s"][1] == pytest.approx(b_first)
        assert req["finish_s"][1] == pytest.approx(b_first + 0.01)
        assert req["finish_s"][0] == pytest.approx(0.40)


def test_async_scheduling_admits_an_arrival_one_step_later_while_busy():
    """Under async (overlap) scheduling the engine picks step n+1's requests when it launches step n, so a request
    arriving while the replica is busy joins the step after the one already chosen (sim/replica.py _admit); an idle
    replica takes it at once. 10 ms steps; A (10 + 40 tokens) arrives at 0, its prefill step runs 0-0.01 s. B (100 +
    2) arriving at 0.035 s (in the step 0.03-0.04 s): synchronous, its prefill runs 0.04-0.05 s (first token 0.05 s);
    async, the step 0.04-0.05 s was chosen at 0.03 s, so 0.05-0.06 s (first token 0.06 s). B arriving at 0.005 s,
    during A's prefill step: 0.01-0.02 s (first token 0.02 s) against 0.02-0.03 s (0.03 s). C arriving at 1 s, after
    A finished at 0.40 s: an idle replica, first token at 1.01 s either way. Multi-step groups (10 steps per call)
    already hold B to the group's end (0.12 s) and add nothing. A loses nothing: done at 0.40 s in every case."""
    from types import SimpleNamespace

    from test_sim_helpers import ConstantStep

    from clusterfit.sim.requests import Requests

    cases = [  # (async, steps per scheduler call, B's arrival, B's first token)
        (False, 1, 0.035, 0.05), (True, 1, 0.035, 0.06), (False, 1, 0.005, 0.02), (True, 1, 0.005, 0.03),
        (True, 10, 0.035, 0.12)]
    for asy, steps, b_at, b_first in cases:
        model = ConstantStep(0.01, max_num_seqs=8)
        model.engine = SimpleNamespace(mixed_batches=True, num_scheduler_steps=steps,  # type: ignore[attr-defined]
                                       async_scheduling=asy)
        run = run_simulation(Requests.build([0.0, b_at, 1.0], [10, 100, 10], [40, 2, 2]), model,
                             SimulationConfig(exact_steps=True))
        req = run.requests
        assert req["first_token_s"][0] == pytest.approx(0.01)
        assert req["first_token_s"][1] == pytest.approx(b_first), (asy, steps, b_at)
        assert req["finish_s"][1] == pytest.approx(b_first + 0.01)
        assert req["finish_s"][0] == pytest.approx(0.40)
        assert req["first_token_s"][2] == pytest.approx(1.01)


def test_async_scheduling_chose_the_next_step_while_the_last_sequences_finished():
    """Under async scheduling the engine picks step n+1's requests when it launches step n (vLLM's batch queue: a
    request that arrives while step n runs is seen after it, for step n+2). A replica whose last sequence finishes
    in step n is therefore not idle at its end if requests were waiting when step n was launched: step n+1 was chosen
    for them then. 10 ms steps; A (10 + 2) arrives at 0: prefill 0-0.01 s, decode 0.01-0.02 s (done). B (100 + 2) at
    0.005 s, during A's prefill: the decode step 0.01-0.02 s was chosen at 0 s, so B's prefill runs 0.02-0.03 s, chosen
    at 0.01 s. C (100 + 2) at 0.015 s, during A's decode step, after that choice: it joins the step after B's
    prefill, 0.03-0.04 s (first token 0.04 s, with B's last token). The simulator took the replica for idle at
    0.02 s (no sequence running) and ran C's prefill with B's, first token 0.03 s. Synchronous scheduling (the
    engine chooses each step at the end of the one before): B prefills with A's decode, 0.01-0.02 s, and C with B's
    decode, 0.02-0.03 s, as before."""
    from types import SimpleNamespace

    from test_sim_helpers import ConstantStep

    from clusterfit.sim.requests import Requests

    for asy, b_first, c_first in ((True, 0.03, 0.04), (False, 0.02, 0.03)):
        model = ConstantStep(0.01, max_num_seqs=8)
        model.engine = SimpleNamespace(mixed_batches=True, async_scheduling=asy)  # type: ignore[attr-defined]
        run = run_simulation(Requests.build([0.0, 0.005, 0.015], [10, 100, 100], [2, 2, 2]), model,
                             SimulationConfig(exact_steps=True))
        req = run.requests
        assert req["finish_s"][0] == pytest.approx(0.02)
        assert req["first_token_s"][1] == pytest.approx(b_first), asy
        assert req["first_token_s"][2] == pytest.approx(c_first), asy
        assert req["finish_s"][1] == pytest.approx(b_first + 0.01)
        assert req["finish_s"][2] == pytest.approx(c_first + 0.01)


def test_token_gaps_histogram_reads_quantiles_within_half_a_bin():
    """TokenGaps keeps gaps in 0.5%-wide geometric bins: a quantile comes back within 0.25% (+ one bin edge) of the
    exact one, the mean exactly, whether gaps arrive one by one or as a decode segment's array."""
    from clusterfit.sim.gaps import GAP_RATIO, TokenGaps

    rng = np.random.default_rng(0)
    g = rng.lognormal(np.log(0.02), 0.6, 4000)
    gaps = TokenGaps()
    gaps.add_many(g[:3000], 2.0)            # a segment seen by two sequences
    for x in g[3000:]:
        gaps.add(float(x), 2.0)
    assert gaps.weight == 8000 and gaps.total_s / gaps.weight == pytest.approx(g.mean(), rel=1e-12)
    for q in (0.5, 0.9, 0.99):
        assert gaps.quantile(q) == pytest.approx(np.quantile(g, q), rel=GAP_RATIO - 1.0)
    same = TokenGaps()
    same.add_many(np.full(5, 0.01), 3.0)    # one bin: the fast path
    assert same.weight == 15 and same.quantile(0.5) == pytest.approx(0.01, rel=0.0025)
    assert TokenGaps().summary((50,)) == {"p50": None, "mean": None}


def test_front_end_latency_shifts_first_token_and_finish_once():
    """An engine's request_latency_s (HTTP, tokenisation, hand-over to the engine process and the stream back) adds
    to every request's TTFT and end-to-end latency, once, and to nothing else: the same requests on 10 ms steps
    finish exactly 25 ms later with it; TPOT and the token gaps do not move. Disaggregated, the prefill pool's
    first token and the decode pool's finish carry it once each (TTFT + 25 ms, E2E + 25 ms)."""
    from types import SimpleNamespace

    from test_sim_helpers import ConstantStep

    from clusterfit.sim.requests import Requests

    def steps(front: float) -> ConstantStep:
        model = ConstantStep(0.01, max_num_seqs=8)
        model.engine = SimpleNamespace(mixed_batches=True, request_latency_s=front)  # type: ignore[attr-defined]
        return model

    reqs = Requests.build([0.0, 0.003, 0.05], [10, 100, 30], [20, 5, 8])
    runs = [run_simulation(reqs, steps(front), SimulationConfig(exact_steps=True)) for front in (0.0, 0.025)]
    a, b = (r.requests for r in runs)
    assert np.allclose(b["first_token_s"] - a["first_token_s"], 0.025)
    assert np.allclose(b["finish_s"] - a["finish_s"], 0.025)
    assert runs[1].token_gaps.total_s == pytest.approx(runs[0].token_gaps.total_s)
    out = [run_disaggregated(reqs, steps(front), steps(front), SimulationConfig(exact_steps=True), 1, 1,
                             lambda tok: 1e-4 * np.asarray(tok) + 3.7e-4).requests for front in (0.0, 0.025)]
    assert np.allclose(out[1]["first_token_s"] - out[0]["first_token_s"], 0.025)
    assert np.allclose(out[1]["finish_s"] - out[0]["finish_s"], 0.025)


def test_token_gaps_of_a_linear_segment_match_the_gaps_one_by_one():
    """A decode segment's gaps alpha + beta x j, added at once (TokenGaps.add_linear, which counts the gaps per bin
    without listing them), give the same histogram as adding each gap: within one bin and across several."""
    from clusterfit.sim.gaps import TokenGaps

    for alpha, beta, n in ((0.010, 1e-7, 50), (0.010, 2e-5, 400), (0.002, 0.0, 30), (0.5, 1e-3, 7)):
        fast, slow = TokenGaps(), TokenGaps()
        fast.add_linear(alpha, beta, n, 3.0)
        for j in range(n):
            slow.add(alpha + beta * j, 3.0)
        assert fast.counts == pytest.approx(slow.counts)
        assert fast.total_s == pytest.approx(slow.total_s) and fast.weight == slow.weight == 3.0 * n
