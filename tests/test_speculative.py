"""Speculative decoding (clusterfit.speculative, sim.config.SpeculativeSpec, Engine.for_speculative): the tokens a step
yields, the drafter's cost from the model, SGLang's defaults under speculative decoding, and the simulator using them."""

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import clusterfit as cf
from clusterfit.arch import load_model
from clusterfit.engines import load_engines
from clusterfit.errors import ClusterfitError, ParameterError
from clusterfit.sim.config import SimulationConfig, SpeculativeSpec
from clusterfit.speculative import (DEFAULT_ACCEPTANCE, acceptance_for_length, draft_cost_fraction,
                                    tokens_per_step)


def test_tokens_per_step_is_the_expected_accepted_prefix_plus_one():
    # 1 + a + a^2 + ... + a^k (Leviathan et al. 2023, eq. 1), by hand
    assert tokens_per_step(1, 0.7) == pytest.approx(1.7)
    assert tokens_per_step(3, 0.7) == pytest.approx(1 + 0.7 + 0.49 + 0.343)
    assert tokens_per_step(4, 0.0) == 1.0 and tokens_per_step(4, 1.0) == 5.0
    with pytest.raises(ClusterfitError):
        tokens_per_step(2, 1.5)


def test_acceptance_length_inverts_tokens_per_step():
    # the default's source: GLM-5.2's MTP, 5 draft tokens, a mean 2.9 tokens accepted per step -> a ~ 0.69
    a = acceptance_for_length(5, 2.9)
    assert tokens_per_step(5, a) == pytest.approx(2.9, abs=1e-9)
    assert 0.69 < a < 0.70 and abs(a - DEFAULT_ACCEPTANCE) < 0.01
    assert acceptance_for_length(1, 1.85) == pytest.approx(0.85)   # DeepSeek-V3's MTP: 85-90% of second tokens
    for bad in (0.9, 7.0):
        with pytest.raises(ClusterfitError, match="outside 1..6"):
            acceptance_for_length(5, bad)


def test_draft_cost_is_one_layer_and_the_head_over_the_active_parameters():
    m = load_model("meta-llama/Llama-3.1-8B")
    # Llama-3.1-8B by hand: a decoder layer = q, o 4096^2 + k, v 4096 x 1024 + MLP 3 x 4096 x 14336 + 2 norms of
    # 4096; LM head and embedding 128256 x 4096 each; one final norm of 4096 spread over the 32 layers
    layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096 + 4096 / 32
    head = 128256 * 4096
    active = 32 * layer + 2 * head
    assert m.active_params == pytest.approx(active)
    assert draft_cost_fraction(m, "eagle3") == pytest.approx((layer + head) / active, rel=1e-9)   # 0.0926
    assert draft_cost_fraction(m, "ngram") == 0.0
    with pytest.raises(ClusterfitError, match="unsupported"):
        draft_cost_fraction(m, "medusa")
    with pytest.raises(ClusterfitError, match="Llama-3.1-8B has none"):   # mtp needs the checkpoint's MTP layers
        draft_cost_fraction(m, "mtp")
    assert draft_cost_fraction(load_model("deepseek-ai/DeepSeek-V3"), "mtp") > 0


def test_speculative_spec_takes_an_acceptance_or_a_length():
    assert SpeculativeSpec(draft_tokens=3).alpha == DEFAULT_ACCEPTANCE
    assert SpeculativeSpec(draft_tokens=3, acceptance_length=2.5).alpha == pytest.approx(
        acceptance_for_length(3, 2.5))
    with pytest.raises(ValidationError, match="not both"):
        SpeculativeSpec(draft_tokens=3, acceptance=0.7, acceptance_length=2.5)
    with pytest.raises(ValidationError, match="more than draft_tokens"):
        SpeculativeSpec(draft_tokens=2, acceptance_length=3.5)
    m = load_model("meta-llama/Llama-3.1-8B")
    assert SpeculativeSpec(method="eagle3").for_model(m).draft_cost == pytest.approx(draft_cost_fraction(m, "eagle3"))
    assert SpeculativeSpec(draft_cost=0.2).for_model(m).draft_cost == 0.2   # a stated cost is kept


def test_sglang_caps_running_requests_under_speculative_decoding():
    eng = load_engines()
    sg = eng["sglang"].for_speculative(dp=8)
    # server_args.py: max_running_requests reset to 48, the scheduler giving each attention-DP rank 48 // dp_size
    assert (sg.max_num_seqs, sg.batch_cap_rule, sg.async_scheduling) == (6, "static", False)
    mine = eng["sglang"].with_settings(max_num_seqs=100, async_scheduling=True).for_speculative(dp=1)
    assert (mine.max_num_seqs, mine.async_scheduling) == (100, True)   # what the user set stays
    assert eng["vllm"].for_speculative(dp=1) is eng["vllm"]


def test_vllm_schedules_synchronously_under_ngram_drafting():
    """vLLM turns async scheduling off for CPU n-gram drafting and keeps it for the EAGLE family and MTP
    (vllm-project/vllm#31998: "disabled implicitly for non-EAGLE/MTP types"); what the user sets stays."""
    vllm = load_engines()["vllm"]
    assert vllm.async_scheduling
    assert vllm.for_speculative(dp=1, method="eagle3").async_scheduling
    assert not vllm.for_speculative(dp=1, method="ngram").async_scheduling
    assert vllm.with_settings(async_scheduling=True).for_speculative(dp=1, method="ngram").async_scheduling


def test_a_simulated_step_model_needs_the_draft_cost():
    from clusterfit.compose import Catalog, build_replica
    from clusterfit.sim.api import simulate

    rep = build_replica(Catalog.load(), "meta-llama/Llama-3.1-8B", "h200", tp=1)
    sim = SimulationConfig(requests=4, arrival={"rate_rps": 1.0}, input={"dist": "fixed", "value": 100},
                           output={"dist": "fixed", "value": 10}, replica={"speculative": {"draft_tokens": 2}})
    with pytest.raises(ClusterfitError, match="draft_cost"):
        simulate(rep.step, sim, requests=None)


def _scenario(tmp_path, speculative):
    doc = {"model": "meta-llama/Llama-3.1-8B", "systems": ["h200"],
           "workload": {"isl": 512, "osl": 256, "load": {"requests_per_s": 0.5}},
           "slo": {"ttft_ms": 2000, "tpot_ms": 50},
           "simulation": {"requests": 40, "replicas": 1, "seed": 1,
                          **({"replica": {"speculative": speculative}} if speculative else {})}}
    path = tmp_path / f"spec-{bool(speculative)}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_speculative_decoding_through_simulate_lowers_light_load_tpot(tmp_path):
    """At light load a step of one sequence yields tokens_per_step tokens for (1 + k x draft cost) x a verify step no
    shorter than a decode step: TPOT falls by at most tokens_per_step / (1 + k x cost), and not to nothing."""
    kw = dict(tp=1, system="h200")
    plain = cf.simulate(scenario=_scenario(tmp_path, None), **kw)
    spec = cf.simulate(scenario=_scenario(tmp_path, {"method": "eagle3", "draft_tokens": 3, "acceptance": 0.7}),
                       **kw)
    cost = draft_cost_fraction(load_model("meta-llama/Llama-3.1-8B"), "eagle3")
    ratio = spec.tpot_s.p50 / plain.tpot_s.p50
    assert (1 + 3 * cost) / tokens_per_step(3, 0.7) * 0.99 < ratio < 0.8


SIM = ("simulate", "meta-llama/Llama-3.1-8B", "--system", "h200", "--tp", "1", "--isl", "512", "--osl", "256",
       "--rate", "0.5", "--requests", "40", "--seed", "1")


def test_simulate_takes_speculative_decoding_options(run_json, run_cli):
    plain = run_json(*SIM)
    spec = run_json(*SIM, "--num-speculative-tokens", "3", "--speculative-method", "eagle3")
    assert spec["tpot_s"]["p50"] < plain["tpot_s"]["p50"]
    longer = run_json(*SIM, "--num-speculative-tokens", "3", "--speculative-method", "eagle3",
                      "--speculative-acceptance-length", "3.5")
    assert longer["tpot_s"]["p50"] < spec["tpot_s"]["p50"]        # 3.5 tokens a step against 2.53 at a = 0.7
    for args, field in ((("--speculative-method", "eagle3"), "--num-speculative-tokens"),
                        (("--num-speculative-tokens", "3", "--speculative-acceptance-length", "9"),
                         "--speculative-acceptance-length"),
                        (("--num-speculative-tokens", "3", "--speculative-acceptance", "0.8",
                          "--speculative-acceptance-length", "2"), "--speculative-acceptance-length"),
                        (("--num-speculative-tokens", "3", "--speculative-method", "medusa"), "--speculative-method"),
                        (("--num-speculative-tokens", "3"), "--speculative-method"),   # mtp: Llama has no MTP layers
                        (("--num-speculative-tokens", "17"), "--num-speculative-tokens")):
        code, out, err = run_cli(*SIM, *args)
        assert code == 2 and err.startswith(f"error: {field}:") and "Traceback" not in err, (args, err)


PERF = ("perf", "meta-llama/Llama-3.1-8B", "--system", "h200", "--tp", "1", "--isl", "1024", "--osl", "128")


def test_perf_prices_a_speculative_step_as_the_simulator_does(run_json):
    """A speculative step = the verify pass (each sequence's token and its k drafts, StepModel.with_verify) x
    (1 + k x draft cost); it emits tokens_per_step tokens per sequence (perfmodel.serving.speculative_step_s)."""
    from clusterfit.compose import Catalog, build_replica

    plain = run_json(*PERF, "--batch", "8", "--context", "1024")
    assert "speculative" not in plain
    out = run_json(*PERF, "--batch", "8", "--context", "1024", "--num-speculative-tokens", "3",
                   "--speculative-method", "eagle3", "--speculative-acceptance", "0.8")
    sm = build_replica(Catalog.load(), "meta-llama/Llama-3.1-8B", "h200", tp=1).step
    cost = draft_cost_fraction(load_model("meta-llama/Llama-3.1-8B"), "eagle3")
    verify = float(sm.with_verify(3).decode_step_s(8, 1024))
    # 32 tokens through the GEMMs, as a decode step of 32 sequences, but 8 sequences' KV read: between the two
    assert float(sm.decode_step_s(8, 1024)) < verify < float(sm.decode_step_s(32, 1024))
    step = verify * (1 + 3 * cost)
    per_step = 1 + 0.8 + 0.8 ** 2 + 0.8 ** 3
    assert out["speculative"] == pytest.approx({"method": "eagle3", "draft_tokens": 3, "acceptance": 0.8,
                                                "tokens_per_step": per_step, "draft_cost": cost})
    assert out["decode_step_s"] == pytest.approx(step, rel=1e-9)
    assert out["tpot_s"] == pytest.approx(step / per_step, rel=1e-9)
    assert out["output_tokens_per_s"] == pytest.approx(8 * per_step / step, rel=1e-9)
    assert out["tpot_s"] < plain["tpot_s"]
    # prefill is unchanged; under async scheduling the step already chosen ahead of the first token is speculative
    ahead = float(sm.with_verify(3).decode_step_s(7, 1024)) * (1 + 3 * cost) - float(sm.decode_step_s(7, 1024))
    assert out["ttft_s"] - plain["ttft_s"] == pytest.approx(ahead, rel=1e-6)
    # the breakdown is of that speculative step (it showed the plain step, 5.69 ms beside a 10.40 ms one at batch 1)
    assert out["breakdown"]["step_s"] == pytest.approx(step, rel=1e-9)
    assert sum(out["breakdown"]["by_kind_s"].values()) == pytest.approx(step, rel=1e-9)
    assert sum(out["breakdown"]["by_op_s"].values()) == pytest.approx(step, rel=1e-9)
    assert plain["breakdown"]["step_s"] == pytest.approx(plain["decode_step_s"], rel=1e-9)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_a_verify_pass_reads_the_kv_once_and_replays_the_decode_graph(engine):
    """StepModel.with_verify: a sequence's k drafts go through the GEMMs as tokens, but their attention reads the
    sequence's KV cache once (the engines' verify kernels take query length k + 1), and a verify batch within the
    CUDA-graph size replays a graph as a decode step does (SGLang's TARGET_VERIFY graphs, vLLM's uniform-decode graphs
    whose sizes count tokens, TensorRT-LLM's decode graphs padded to max_draft_len + 1 tokens per request).
    Hand check, Llama-3.1-8B bf16 on one H200 at batch 1 and a 32,768-token context (GB = 1e9 bytes): a decode step
    reads the 16.06 GB of weights (3.35 ms at 4.8 TB/s) and the context's KV, 32 layers x 8 KV heads x 128 x 2 (K, V) x
    2 bytes = 131,072 bytes per token, 4.29 GB (0.89 ms); three more queries add 3 x 2 x 8.03e9 = 48 GFLOP of GEMMs and
    3 x (4 x 32 query heads x 128 x 32,768 keys x 32 layers) = 52 GFLOP of attention, 0.2 ms at half the 989 TFLOP/s
    dense bf16 peak, and read nothing more: the verify pass is within 5% of the decode step (it was 8.2x, with the
    drafts costed as prefill tokens outside a graph)."""
    from clusterfit.compose import Catalog, build_replica

    sm = build_replica(Catalog.load(), "meta-llama/Llama-3.1-8B", "h200", tp=1, engine=engine).step
    v = sm.with_verify(3)
    assert 1.0 < float(v.decode_step_s(1, 32768)) / float(sm.decode_step_s(1, 32768)) < 1.05

    def per_kernel_s(model, b: int) -> float:
        return model.step_breakdown(0.0, 0.0, b, b * 1024.0).by_op_s["kernel_overhead"]

    graph = per_kernel_s(sm, 1)
    assert per_kernel_s(v, 1) == graph
    cap = sm.engine.cuda_graph_max_bs
    last = cap // 4 if engine == "vllm" else cap   # vLLM: 512 tokens of 1 + 3 per sequence; the others: sequences
    assert per_kernel_s(v, last) == graph and per_kernel_s(v, last + 1) > graph
    assert (per_kernel_s(sm, last + 1) == graph) == (engine == "vllm")   # a plain decode batch: sequences = tokens


def test_perf_under_sglang_speculative_decoding_runs_at_most_48(run_json):
    plain = run_json(*PERF, "--engine", "sglang", "--max-throughput")
    eagle = ("--num-speculative-tokens", "2", "--speculative-method", "eagle3")
    spec = run_json(*PERF, "--engine", "sglang", "--max-throughput", *eagle)
    assert plain["batch"] > 48 and spec["batch"] == 48
    own = run_json(*PERF, "--engine", "sglang", "--max-throughput", *eagle, "--max-num-seqs", "64")
    assert own["batch"] == 64


def test_perf_rejects_bad_speculative_options(run_cli):
    for args, field in ((("--speculative-acceptance", "0.5"), "--num-speculative-tokens"),
                        (("--num-speculative-tokens", "2", "--speculative-acceptance-length", "3.5"),
                         "--speculative-acceptance-length"),
                        (("--num-speculative-tokens", "2"), "--speculative-method")):   # mtp without MTP layers
        code, out, err = run_cli(*PERF, "--batch", "1", "--context", "1024", *args)
        assert code == 2 and err.startswith(f"error: {field}:") and "Traceback" not in err, (args, err)


@settings(max_examples=200, deadline=None)
@given(k=st.integers(1, 16), a=st.floats(0.0, 0.995), b=st.floats(0.0, 0.995))
def test_tokens_per_step_rises_with_acceptance_and_inverts(k, a, b):
    lo, hi = sorted((a, b))
    assert 1.0 <= tokens_per_step(k, lo) <= tokens_per_step(k, hi) <= k + 1
    assert tokens_per_step(k, a) <= tokens_per_step(k + 1, a)
    assert tokens_per_step(k, acceptance_for_length(k, tokens_per_step(k, a))) == pytest.approx(
        tokens_per_step(k, a), rel=1e-9, abs=1e-9)


# ------------------------------------------------------------------------------------------ plan
PLAN = ("plan", "meta-llama/Llama-3.1-8B", "--system", "hgx_h200", "--isl", "1024", "--osl", "256", "--rate", "10",
        "--tpot-ms", "12", "--no-disagg")


def test_plan_curve_prices_speculative_steps_as_perf_does():
    """A pure decode step of the plan's curve is perf's speculative step (perfmodel.serving.speculative_step_s) and
    its TPOT that step over tokens_per_step; every step gives up k x B tokens of its budget to the drafts."""
    from clusterfit.compose import Catalog, build_replica
    from clusterfit.perfmodel.serving import speculative_step_s
    from clusterfit.planning.capacity import aggregated_curve, decode_curve
    from clusterfit.planning.workload import SLO, Load, Workload
    from clusterfit.speculative import Drafting

    sm = build_replica(Catalog.load(), "meta-llama/Llama-3.1-8B", "h200", tp=1).step
    wl = Workload.simple(1024, 256, Load("requests_per_s", 10.0))
    slo = SLO(None, None, 90.0)
    batch = [1.0, 8.0, 64.0]
    drafting = Drafting("eagle3", 3, 0.7, 0.09)
    plain = aggregated_curve(sm, wl, slo, batch)
    spec = aggregated_curve(sm, wl, slo, batch, drafting=drafting)
    ctx = wl.decode_context_mean_tokens
    step = [float(speculative_step_s(sm, b, ctx, drafting)) for b in batch]
    assert spec.decode_only_s == pytest.approx([s / drafting.tokens_per_step for s in step], rel=1e-9)
    dec = decode_curve(sm, wl, slo, batch, drafting=drafting)
    assert dec.tpot_s == pytest.approx(spec.decode_only_s, rel=1e-9)
    assert plain.decode_only_s == pytest.approx([float(sm.decode_step_s(b, ctx)) for b in batch], rel=1e-9)
    # batch 1: a verify pass is no shorter than a decode step, so the TPOT falls at most to step factor / tokens per
    # step (1.27 / 2.53); bandwidth-bound, the three drafts cost little, so it does fall (as perf: 5.69 -> 4.11 ms)
    ratio = spec.decode_only_s[0] / plain.decode_only_s[0]
    assert drafting.step_factor / drafting.tokens_per_step <= ratio < 0.8
    assert spec.tpot_s[0] < plain.tpot_s[0]
    # an acceptance of 0 gains one token a step for a dearer step: never faster than without drafts
    none = aggregated_curve(sm, wl, slo, batch, drafting=Drafting("eagle3", 3, 0.0, 0.09))
    assert (none.tpot_s > plain.tpot_s).all() and (none.rate_rps < plain.rate_rps).all()


def test_plan_sizes_for_speculative_decoding_and_the_simulation_agrees(run_json):
    plain = run_json(*PLAN)
    assert "speculative" not in plain
    spec = run_json(*PLAN, "--num-speculative-tokens", "3", "--speculative-method", "eagle3", "--verify",
                    "--verify-requests", "3000")
    cost = draft_cost_fraction(load_model("meta-llama/Llama-3.1-8B"), "eagle3")
    assert spec["speculative"] == pytest.approx({"method": "eagle3", "draft_tokens": 3, "acceptance": 0.7,
                                                 "draft_cost": cost, "tokens_per_step": tokens_per_step(3, 0.7)})
    rec, base = spec["recommended"], plain["recommended"]
    assert rec["tpot_s"] < base["tpot_s"]
    # the simulation runs the same drafts: its TPOT at the judged percentile within 10% of the plan's
    verdict = spec["verify"]["verdict"]
    assert verdict["tpot_s"] == pytest.approx(rec["tpot_s"], rel=0.10)
    assert verdict["tpot_ok"] and verdict["goodput_ok"]


def test_plan_takes_the_scenarios_speculative_decoding(tmp_path, run_json):
    """A scenario's simulation.replica.speculative sizes the plan too (the plan and --verify run the same drafts);
    an option changes it."""
    path = _scenario(tmp_path, {"method": "eagle3", "draft_tokens": 3, "acceptance": 0.7})
    out = run_json("plan", "--scenario", path, "--no-disagg")
    assert out["speculative"]["draft_tokens"] == 3 and out["speculative"]["acceptance"] == 0.7
    more = run_json("plan", "--scenario", path, "--no-disagg", "--speculative-acceptance-length", "3.5")
    assert more["speculative"]["tokens_per_step"] == pytest.approx(3.5)


@pytest.mark.parametrize("command", ["perf", "simulate", "plan"])
def test_the_longest_acceptance_length_is_every_draft_accepted(run_json, command):
    """--speculative-acceptance-length K + 1 (its most: every draft accepted) is acceptance 1; the result's schema
    took acceptance < 1 only, so a valid option ended in a pydantic traceback from perf, simulate and plan."""
    base = {"perf": (*PERF, "--batch", "1", "--context", "1024"), "simulate": SIM, "plan": PLAN}[command]
    out = run_json(*base, "--num-speculative-tokens", "3", "--speculative-method", "eagle3",
                   "--speculative-acceptance-length", "4")
    assert out["speculative"]["acceptance"] == pytest.approx(1.0, abs=1e-9)
    assert out["speculative"]["tokens_per_step"] == pytest.approx(4.0, abs=1e-9)


def test_sglang_plan_under_speculative_decoding_runs_at_most_48(run_json):
    out = run_json("plan", "meta-llama/Llama-3.1-8B", "--system", "hgx_h200", "--isl", "1024", "--osl", "256",
                   "--rate", "40", "--no-disagg", "--engine", "sglang", "--num-speculative-tokens", "2",
                   "--speculative-method", "eagle3")
    assert out["engine_settings"]["max_num_seqs"] == 48 and out["recommended"]["batch"] <= 48


def test_plan_rejects_bad_speculative_options(run_cli):
    for args, field in ((("--speculative-acceptance", "0.5"), "--num-speculative-tokens"),
                        (("--num-speculative-tokens", "2", "--speculative-method", "medusa"), "--speculative-method"),
                        (("--num-speculative-tokens", "2"), "--speculative-method"),   # mtp without MTP layers
                        (("--num-speculative-tokens", "2", "--speculative-acceptance-length", "3.5"),
                         "--speculative-acceptance-length")):
        code, out, err = run_cli(*PLAN, *args)
        assert code == 2 and err.startswith(f"error: {field}:") and "Traceback" not in err, (args, err)


def test_mtp_drafting_loads_the_checkpoints_mtp_layers():
    """Under mtp the engine loads the checkpoint's MTP (NextN) layers as the drafter: their weights leave that much
    less for the KV cache on every GPU (memory.weight_bytes_per_gpu with include_mtp); EAGLE heads are a separate
    checkpoint the config does not describe, so eagle3 leaves the budget alone. Either drafter's attention layer keeps
    KV in the same cache (memory.draft_kv_layers): DeepSeek-V3's bf16 MLA cache, 576 latent + rope elements x 2 B =
    1,152 B per layer on every TP rank, goes from 61 x 1,152 = 70,272 to 62 x 1,152 = 71,424 B per token per GPU;
    Llama-3.1-8B's from 32 to 33 x (2 x 8 KV heads x 128 x 2 B) = 135,168 B with an EAGLE-3 head."""
    from clusterfit.compose import Catalog, build_replica
    from clusterfit.memory import weight_bytes_per_gpu

    kw = dict(tp=8, engine="vllm")
    plain = build_replica(Catalog.load(), "deepseek-ai/DeepSeek-V3", "h200", **kw)
    mtp = build_replica(Catalog.load(), "deepseek-ai/DeepSeek-V3", "h200", speculative="mtp", **kw)
    eagle = build_replica(Catalog.load(), "deepseek-ai/DeepSeek-V3", "h200", speculative="eagle3", **kw)
    extra = (weight_bytes_per_gpu(plain.model, plain.precision, plain.layout, include_mtp=True)
             - weight_bytes_per_gpu(plain.model, plain.precision, plain.layout))
    assert extra > 1e9      # one fp8 NextN layer of 11.6B parameters over 8 GPUs
    assert plain.step.kv_rank_budget_bytes - mtp.step.kv_rank_budget_bytes == pytest.approx(extra, rel=1e-9)
    assert eagle.step.kv_rank_budget_bytes == plain.step.kv_rank_budget_bytes
    assert plain.step.kv_bytes_per_token_per_gpu == 70_272
    assert mtp.step.kv_bytes_per_token_per_gpu == eagle.step.kv_bytes_per_token_per_gpu == 71_424
    assert eagle.step.kv_capacity_tokens == pytest.approx(plain.step.kv_capacity_tokens * 61 / 62, rel=1e-12)
    from clusterfit.memory import fit

    mem = fit(mtp.model, mtp.system, mtp.precision, mtp.layout, 1, mtp.engine, context=4096)
    assert mem.kv_bytes_per_token_per_gpu == 71_424   # the memory model counts the same layer
    assert mem.kv_bytes_per_sequence_per_gpu == 62 * 1_152 * 4096
    assert any("mtp drafter's 1 attention layer(s)" in n for n in mem.notes)
    llama = build_replica(Catalog.load(), "meta-llama/Llama-3.1-8B", "h200", tp=1, speculative="eagle3")
    assert llama.step.kv_bytes_per_token_per_gpu == 135_168
    ngram = build_replica(Catalog.load(), "meta-llama/Llama-3.1-8B", "h200", tp=1, speculative="ngram")
    assert ngram.step.kv_bytes_per_token_per_gpu == 32 * 4_096   # prompt lookup has no layers


# ---- EAGLE draft heads described by their config.json (tests/data/eagle/SOURCE.md) ------------------------------
EAGLE = Path(__file__).parent / "data" / "eagle"


def test_draft_head_sizes_by_hand():
    """vLLM's EAGLE-3 Llama head (llama_eagle3.py): one decoder layer whose q/k/v read 2 x hidden, fc 3h -> h
    (replicated), its own LM head of draft_vocab_size rows, the target's embedding (same vocabulary). Llama-3.1-70B's
    SpecForge head, h 8,192, 64 heads, 8 KV heads of 128, intermediate 28,672:
      q/k/v 16,384 x 80 x 128 = 167,772,160; o 8,192 x 8,192 = 67,108,864; MLP 3 x 8,192 x 28,672 = 704,643,072;
      LM head 32,000 x 8,192 = 262,144,000 -> 1,201,668,096 split over TP;
      fc 3 x 8,192 x 8,192 = 201,326,592 + 4 norms of 8,192 = 201,359,360 on every GPU.
    At TP8 in 16 bits: (1,201,668,096 / 8 + 201,359,360) x 2 = 703,135,744 bytes per GPU."""
    from clusterfit.speculative import draft_head

    cfg = json.loads((EAGLE / "llama3-70B-eagle3.json").read_text())
    head = draft_head(cfg, load_model("meta-llama/Llama-3.1-70B"), "eagle3")
    assert (head.sharded_params, head.replicated_params) == (1_201_668_096, 201_359_360)
    assert head.weight_bytes_per_gpu(8) == 703_135_744
    assert head.kv_bytes_per_token_per_gpu(8, 2.0) == 2 * 1 * 128 * 2      # one KV head per rank
    qwen = draft_head(json.loads((EAGLE / "qwen3-32b-eagle3.json").read_text()), load_model("Qwen/Qwen3-32B"), "eagle3")
    # q/k/v 10,240 x 80 x 80 + o 5,120 x 5,120 + MLP 3 x 5,120 x 25,600 + LM head 32,000 x 5,120
    assert qwen.sharded_params == 65_536_000 + 26_214_400 + 393_216_000 + 163_840_000
    assert qwen.replicated_params == 3 * 5120 * 5120 + 4 * 5120
    # the drafter's cost per draft token: the head's 1,403,027,456 parameters over the target's 70,553,706,496
    # (Llama-3.1-70B's published total), against one of its 80 layers + its 128,256 x 8,192 LM head without the
    # config: ((70,553,706,496 - 2 x 1,050,673,152) / 80 + 1,050,673,152) / 70,553,706,496 = 2.70%
    target = load_model("meta-llama/Llama-3.1-70B")
    assert draft_cost_fraction(target, "eagle3", head) == pytest.approx(1_403_027_456 / 70_553_706_496, rel=1e-12)
    assert draft_cost_fraction(target, "eagle3") == pytest.approx(
        ((70_553_706_496 - 2 * 1_050_673_152) / 80 + 1_050_673_152) / 70_553_706_496, rel=1e-12)
    own = draft_head({**cfg, "vocab_size": 128_000}, target, "eagle3")   # not the target's vocabulary: own table
    assert own.sharded_params == 1_201_668_096 + 128_000 * 8192 and own.embedding_params == 128_000 * 8192
    assert draft_cost_fraction(target, "eagle3", own) == draft_cost_fraction(target, "eagle3", head)  # one row read
    # the same shapes as an EAGLE(-1) head (the EAGLE-3 markers removed: sized as eagle, they are refused below)
    plain = {k: v for k, v in cfg.items() if k not in ("architectures", "draft_vocab_size")}
    eagle1 = draft_head(plain, load_model("meta-llama/Llama-3.1-70B"), "eagle")   # h-wide q/k/v, fc 2h, shared head
    assert eagle1.sharded_params == 8192 * 80 * 128 + 67_108_864 + 704_643_072
    assert eagle1.replicated_params == 2 * 8192 * 8192 + 3 * 8192
    with pytest.raises(ParameterError, match="describes an EAGLE-3 head .LlamaForCausalLMEagle3., but the method is "
                                             "eagle; give --speculative-method eagle3"):
        draft_head(cfg, load_model("meta-llama/Llama-3.1-70B"), "eagle")


@pytest.mark.parametrize("change, method, message", [
    ({"hidden_size": 4096}, "eagle3", "hidden_size 4,096 is not Llama-3.1-70B's 8,192"),
    ({"num_local_experts": 16}, "eagle3", "mixture-of-experts draft layer"),
    ({"intermediate_size": 0}, "eagle3", "'intermediate_size' must be a positive integer"),
    ({"num_attention_heads": True}, "eagle3", "'num_attention_heads' must be a positive integer"),
    ({}, "mtp", "only eagle and eagle3 load a draft head"),
    ({"num_hidden_layers": 100_000_000}, "eagle3", "more than the 8 layers a draft head has"),
    ({"head_dim": None, "num_attention_heads": 60}, "eagle3", "give 'head_dim': hidden_size 8,192 is not a multiple"),
])
def test_draft_head_refusals_name_the_field(change, method, message):
    from clusterfit.schema import ParameterError
    from clusterfit.speculative import draft_head

    cfg = {**json.loads((EAGLE / "llama3-70B-eagle3.json").read_text()), **change}
    with pytest.raises(ParameterError, match=message) as exc:
        draft_head(cfg, load_model("meta-llama/Llama-3.1-70B"), method)
    assert exc.value.parameter == "speculative_draft_config"


def test_draft_config_is_counted_in_perf_and_simulate(run_cli):
    """The head's weights come out of every GPU's KV budget (perf's weight_bytes_per_gpu grows by exactly the
    hand-computed 703,135,744 bytes) and the simulator admits less; errors name --speculative-draft-config."""
    base = ("meta-llama/Llama-3.1-70B", "--system", "h200", "--tp", "8", "--isl", "1000", "--osl", "100",
            "--num-speculative-tokens", "3", "--speculative-method", "eagle3")
    head = ("--speculative-draft-config", str(EAGLE / "llama3-70B-eagle3.json"))
    runs = {}
    for name, extra in (("without", ()), ("with", head)):
        code, out, err = run_cli("perf", *base, "--concurrency", "8", *extra, "--json")
        assert code == 0, err
        runs[name] = json.loads(out)
    assert runs["with"]["weight_bytes_per_gpu"] - runs["without"]["weight_bytes_per_gpu"] == 703_135_744
    assert runs["with"]["kv_capacity_tokens"] < runs["without"]["kv_capacity_tokens"]
    assert any("takes 0.70 GB per GPU" in n for n in runs["with"]["notes"])
    assert any("weights are not counted" in n for n in runs["without"]["notes"])
    admits = []
    for extra in ((), head):
        code, out, err = run_cli("simulate", *base, "--rate", "1", "--requests", "20", *extra, "--json")
        assert code == 0, err
        admits.append(json.loads(out)["kv_admit_tokens"])
    assert admits[1] < admits[0]
    for extra, message in ((("--speculative-draft-config", "nope.json"), "draft config not found"),
                           (("--speculative-draft-config", str(EAGLE / "qwen3-32b-eagle3.json")),
                            "hidden_size 5,120 is not Llama-3.1-70B's 8,192")):
        code, out, err = run_cli("perf", *base, "--concurrency", "8", *extra)
        assert code == 2 and err.startswith("error: --speculative-draft-config:") and message in err, err
    code, out, err = run_cli("perf", *base[:-2], "--concurrency", "8", *head)   # mtp (the default) loads no head
    assert code == 2 and "--speculative-draft-config" in err and "not with mtp" in err


def test_fit_counts_the_drafter_as_perf_does(run_cli):
    """`fit` takes the speculative options: DeepSeek-V3's MTP layer adds its fp8 weights and one more 1,152 B MLA
    layer per token per GPU (71,424 B); Llama-3.1-70B's EAGLE-3 head adds the hand-computed 703,135,744 B per GPU at
    TP8; mtp on a model without MTP layers is refused as in perf."""
    def fit(*args):
        code, out, err = run_cli("fit", *args, "--system", "h200", "--tp", "8", "--context", "4096", "--json")
        assert code == 0, err
        return json.loads(out)["results"][0]

    plain, mtp = fit("deepseek-ai/DeepSeek-V3"), fit("deepseek-ai/DeepSeek-V3", "--num-speculative-tokens", "1")
    assert (plain["kv_bytes_per_token_per_gpu"], mtp["kv_bytes_per_token_per_gpu"]) == (70_272, 71_424)
    assert mtp["weight_bytes_per_gpu"] - plain["weight_bytes_per_gpu"] > 1e9   # one fp8 NextN layer over 8 GPUs
    assert mtp["max_sequences"] < plain["max_sequences"]
    base = ("meta-llama/Llama-3.1-70B", "--num-speculative-tokens", "3", "--speculative-method", "eagle3")
    counted = fit(*base, "--speculative-draft-config", str(EAGLE / "llama3-70B-eagle3.json"))
    uncounted = fit(*base)
    assert counted["weight_bytes_per_gpu"] - uncounted["weight_bytes_per_gpu"] == 703_135_744
    # without the head's config its weights are unknown: fit says so, as perf does
    said = "the eagle3 draft head's weights are not counted (give its config.json: --speculative-draft-config)"
    assert said in uncounted["notes"] and said not in counted["notes"]
    code, out, err = run_cli("fit", "meta-llama/Llama-3.1-8B", "--num-speculative-tokens", "2")
    assert code == 2 and err.startswith("error: --speculative-method:") and "has none" in err, err


def test_simulate_says_what_it_drafted(run_json):
    """simulate ran draft tokens (its TPOT changed) but its result did not say so; it carries perf's block."""
    args = ("simulate", "meta-llama/Llama-3.1-8B", "--system", "h200", "--tp", "1", "--isl", "1024", "--osl", "128",
            "--rate", "0.5", "--requests", "100")
    spec = run_json(*args, "--num-speculative-tokens", "3", "--speculative-method", "eagle3")["speculative"]
    assert spec["method"] == "eagle3" and spec["draft_tokens"] == 3 and spec["tokens_per_step"] > 1
    assert "speculative" not in run_json(*args)


def test_plan_explains_a_speculative_step_as_perf_prices_it(run_json):
    """Under speculative decoding the plan's why said 'mean TPOT = the decode step' and quoted the plain step (8.4 ms
    against an 8 ms TPOT target met); it now quotes the speculative step, and that step is perf's at that batch."""
    args = ("--num-speculative-tokens", "3", "--speculative-method", "eagle3")
    out = run_json("plan", "llama-3.1-8b", "--system", "h200", "--isl", "1024", "--osl", "256", "--rate", "20",
                   "--ttft-ms", "500", "--tpot-ms", "8", *args)
    r = out["recommended"]
    per_step = out["speculative"]["tokens_per_step"]
    assert f"the speculative step over its {per_step:.2f} tokens per sequence" in r["why"]
    assert "the decode step" not in r["why"]
    perf = run_json("perf", "llama-3.1-8b", "--system", "h200", "--tp", "1", "--isl", "1024", "--osl", "256",
                    "--batch", str(int(r["max_batch_within_slo"])), "--context", str(1024 + 128), *args)
    assert r["step_breakdown_s"]["step_s"] == pytest.approx(perf["decode_step_s"], rel=1e-12)
    assert r["step_breakdown_s"]["step_s"] / per_step <= 8e-3


@pytest.mark.parametrize("k, length", [(3, 1.0), (1, 1.7), (5, 3.5)])
def test_simulator_prices_a_speculative_step_as_perf_does(k, length):
    """One request at a time, the simulator's TPOT is perf's speculative step over its tokens per step at the run's
    mean context (isl + osl / 2). Its tabled decode steps left out the verify tokens' attention over their context
    (the mixed step and perf count it), so its TPOT was ~7.5% below perf's (9.64 ms -> 8.90 ms at length 1.0)."""
    kw = dict(num_speculative_tokens=k, speculative_method="eagle3", speculative_acceptance_length=length)
    p = cf.perf(model="llama-3.1-8b", system="h200", isl=512, osl=256, batch=1, context=512 + 128, **kw)
    s = cf.simulate(model="llama-3.1-8b", system="h200", isl=512, osl=256, rate=0.1, requests=40, replicas=1, **kw)
    assert s.tpot_s.p50 == pytest.approx(p.tpot_s, rel=0.01 if length > 1 else 0.002)
