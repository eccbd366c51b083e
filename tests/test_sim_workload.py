"""Simulator workloads: arrival processes, lengths, sessions, trace import and its errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from clusterfit.errors import ClusterfitError
from clusterfit.sim import ArrivalSpec, SampledLengthSpec, SessionSpec, generate, load_trace, sample_traces
from clusterfit.sim.api import build_requests, parse_simulation
from clusterfit.sim.requests import arrival_times, draw_lengths


@pytest.mark.parametrize("process", ["poisson", "gamma", "mmpp", "diurnal"])
def test_arrival_processes_keep_the_mean_rate(process):
    spec = ArrivalSpec(process=process, rate_rps=50.0, cv=3.0, burst_factor=4, burst_fraction=0.1, dwell_s=5,
                       period_s=200.0, amplitude=0.8)
    # pooled over seeds: one 200,000-request mmpp run (5 s bursts among 45 s base dwells, ~80 cycles) varies by ~6%
    spans = []
    for seed in range(8):
        t = arrival_times(spec, 200_000, np.random.default_rng([1, seed]))
        assert np.all(np.diff(t) >= 0) and t[0] == 0
        spans.append(t[-1])
    assert 199_999 / np.mean(spans) == pytest.approx(50.0, rel=0.03)


def test_bursty_processes_are_burstier_than_poisson():
    def cv_of_counts(process):
        t = arrival_times(ArrivalSpec(process=process, rate_rps=50.0, cv=3.0), 100_000, np.random.default_rng(2))
        counts = np.histogram(t, np.arange(0, t[-1], 1.0))[0]
        return counts.std() / counts.mean()
    assert cv_of_counts("gamma") > 2 * cv_of_counts("poisson")
    assert cv_of_counts("mmpp") > 2 * cv_of_counts("poisson")


def test_lengths():
    rng = np.random.default_rng(0)
    assert np.all(draw_lengths(SampledLengthSpec(value=7), 10, rng) == 7)
    x = draw_lengths(SampledLengthSpec(dist="lognormal", mean=1000, cv=1.0), 200_000, rng)
    assert x.mean() == pytest.approx(1000, rel=0.02) and x.std() / x.mean() == pytest.approx(1.0, rel=0.05)
    e = draw_lengths(SampledLengthSpec(dist="empirical", values=[10, 1000], weights=[3, 1]), 100_000, rng)
    assert (e == 10).mean() == pytest.approx(0.75, abs=0.01)
    clip = draw_lengths(SampledLengthSpec(dist="lognormal", mean=1000, cv=2.0, max=1500, min=5), 10_000, rng)
    assert clip.max() <= 1500 and clip.min() >= 5
    with pytest.raises(ValueError):
        SampledLengthSpec(dist="lognormal")


def test_sessions_grow_their_context_and_share_a_prefix():
    req = generate(500, ArrivalSpec(rate_rps=1.0), SampledLengthSpec(value=1000), SampledLengthSpec(value=100),
                   np.random.default_rng(3), SessionSpec(turns=5, think_time_s=10, shared_prefix_tokens=500,
                                                         new_tokens=SampledLengthSpec(value=50)))
    assert len(req) == 500
    for s in range(3):
        m = req.prefix_key == s
        ins, shared = req.input_tokens[m], req.shared_tokens[m]
        assert ins.tolist() == [1500, 1650, 1800, 1950, 2100]  # previous prompt + 100 answer + 50 new
        assert shared.tolist() == [0, 1600, 1750, 1900, 2050]
        assert np.allclose(np.diff(req.arrival_s[m]), 10.0)


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_azure_and_burstgpt_columns(tmp_path):
    az = _write(tmp_path, "az.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n")
    r = load_trace(az)
    assert r.arrival_s.tolist() == pytest.approx([0.0, 4.314579], abs=1e-6)
    assert r.input_tokens.tolist() == [374, 396] and r.output_tokens.tolist() == [44, 109]
    bg = _write(tmp_path, "bg.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                "5,ChatGPT,472,18,490,Conversation log\n45,GPT-4,1087,0,1087,Conversation log\n")
    r = load_trace(bg)
    assert r.arrival_s.tolist() == [0.0, 40.0] and r.output_tokens.tolist() == [18, 1]


def test_jsonl_sessions(tmp_path):
    rows = [{"arrival_s": 0, "input_tokens": 100, "output_tokens": 20, "session_id": "a"},
            {"arrival_s": 1, "input_tokens": 50, "output_tokens": 5, "session_id": "b"},
            {"arrival_s": 3, "input_tokens": 150, "output_tokens": 10, "session_id": "a"}]
    p = _write(tmp_path, "t.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    r = load_trace(p)
    assert r.prefix_key.tolist() == [0, 1, 0] and r.shared_tokens.tolist() == [0, 0, 120]


@pytest.mark.parametrize("text, match", [
    ("time,input_tokens\n0,5\n", r"t\.csv:1: missing column\(s\) output"),
    ("arrival_s,input_tokens,output_tokens\n0,5,5\n1,-3,5\n", r"t\.csv:3: input tokens must be >= 0"),
    ("arrival_s,input_tokens,output_tokens\n0,5,5\n2,5,5\n1,5,5\n", r"t\.csv:4: arrival time '1' is earlier"),
    ("arrival_s,input_tokens,output_tokens\n0,5,abc\n", r"t\.csv:2: output tokens 'abc' is not a number"),
    ("arrival_s,input_tokens,output_tokens\n0,5\n", r"t\.csv:2: 2 fields, the header has 3"),
    ("arrival_s,input_tokens,output_tokens\nyesterday,5,5\n", r"t\.csv:2: cannot read arrival time"),
    ("arrival_s,input_tokens,output_tokens\n", r"no requests"),
])
def test_malformed_traces_name_the_line(tmp_path, text, match):
    with pytest.raises(ClusterfitError, match=match):
        load_trace(_write(tmp_path, "t.csv", text))


def test_malformed_jsonl_names_the_line(tmp_path):
    p = _write(tmp_path, "t.jsonl", '{"arrival_s": 0, "input_tokens": 1, "output_tokens": 1}\n{oops\n')
    with pytest.raises(ClusterfitError, match=r"t\.jsonl:2: not valid JSON"):
        load_trace(p)
    p = _write(tmp_path, "u.jsonl", '{"arrival_s": 0, "input_tokens": 1, "output_tokens": 1}\n'
                                    '{"arrival_s": 1, "input_tokens": 1}\n')
    with pytest.raises(ClusterfitError, match=r"u\.jsonl:2: missing field 'output_tokens'"):
        load_trace(p)


def test_shipped_samples_load_and_are_reproducible(tmp_path):
    from clusterfit.sim.make_traces import write_samples

    shipped = sample_traces()
    assert {p.name for p in shipped} >= {"azure_code_sample.csv", "azure_conv_sample.csv", "burstgpt_sample.csv",
                                         "agent_sessions_sample.jsonl"}
    fresh = write_samples(tmp_path)
    for p in fresh:
        assert p.read_bytes() == (shipped[0].parent / p.name).read_bytes(), p.name
        assert len(load_trace(p)) >= 1000
    assert len(load_trace("azure_code_sample.csv", limit=10)) == 10  # found by name among the samples


def test_simulation_section_and_scenario_workload():
    from clusterfit.planning.scenario import parse_scenario

    with pytest.raises(ClusterfitError, match="simulation: replicas"):
        parse_simulation({"replicas": 0})
    with pytest.raises(ClusterfitError, match="policy"):
        parse_simulation({"policy": "fastest"})
    # the replica keys took vLLM's engine-argument names; the old ones say what they became
    with pytest.raises(ClusterfitError, match="replica: token_budget was renamed max_num_batched_tokens"):
        parse_simulation({"replica": {"token_budget": 512}})
    with pytest.raises(ClusterfitError, match="replica: max_batch was renamed max_num_seqs"):
        parse_simulation({"replica": {"max_batch": 8}})
    replica = parse_simulation({"replica": {"max_num_seqs": 8, "max_num_batched_tokens": 512}}).replica
    assert (replica.max_num_seqs, replica.max_num_batched_tokens) == (8, 512)
    scen = parse_scenario({"model": "meta-llama/Llama-3.1-8B", "workload": {"isl": {"mean": 2000, "p50": 1200},
                           "osl": 300, "load": {"output_tokens_per_s": 3000}},
                           "simulation": {"requests": 20000, "seed": 4}})
    sim = parse_simulation(scen.simulation)
    req = build_requests(sim, scen.to_workload())
    assert len(req) == 20000 and np.all(req.output_tokens == 300)
    assert req.input_tokens.mean() == pytest.approx(2000, rel=0.05)
    assert len(req) / req.duration_s == pytest.approx(10.0, rel=0.05)  # 3000 tok/s / 300 tokens
    agent = parse_scenario({"model": "x", "workload": {"agent": {"shared_prefix_tokens": 1000, "turns": 4,
                            "input_tokens_per_turn": 200, "output_tokens_per_turn": 100, "think_time_s": 5},
                            "load": {"requests_per_s": 8}}})
    req = build_requests(parse_simulation({"requests": 4000}), agent.to_workload())
    assert req.input_tokens[req.prefix_key == 0].tolist() == [1200, 1500, 1800, 2100]
    assert len(req) / req.duration_s == pytest.approx(8.0, rel=0.1)


_AUTOSCALED = ("model: llama-3.1-8b\nsystems: [hgx_h200]\n"
               "workload: {{isl: 500, osl: 50, load: {{requests_per_s: 2}}}}\nsimulation: {{requests: 50, {section}}}\n")


@pytest.mark.parametrize("section, says", [
    # Cluster._tick adds a replica above up_outstanding and drains one below down_outstanding: 2 < mean < 32 did both
    ("autoscale: {up_outstanding: 2, down_outstanding: 32}", "autoscale.down_outstanding: 32 must be below "
     "up_outstanding (2)"),
    ("autoscale: {up_outstanding: 4, down_outstanding: 4}", "autoscale.down_outstanding: 4 must be below"),
    ("autoscale: {up_outstanding: 1}", "autoscale.down_outstanding: 2 must be below up_outstanding (1)"),  # default
    ("replicas: 2, autoscale: {min_replicas: 4, max_replicas: 6}",    # ran below its minimum
     "autoscale: replicas (2) is outside [min_replicas, max_replicas] = [4, 6]"),
    ("replicas: 8, autoscale: {min_replicas: 4, max_replicas: 6}", "autoscale: replicas (8) is outside"),
    ("autoscale: {min_replicas: 5, max_replicas: 4}", "autoscale: min_replicas (5) exceeds max_replicas (4)"),
], ids=["up-below-down", "up-equals-down", "up-below-default-down", "replicas-below-min", "replicas-above-max",
        "min-above-max"])
@pytest.mark.parametrize("command", ["simulate", "plan"])
def test_contradictory_autoscale_settings_are_refused(run_cli, tmp_path, command, section, says):
    f = tmp_path / "s.yaml"
    f.write_text(_AUTOSCALED.format(section=section))
    code, out, err = run_cli(command, "--scenario", str(f), "--system", "h200")
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: scenario file {f}: simulation: {says}"), err


def test_consistent_autoscale_settings_run(run_json, tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(_AUTOSCALED.format(section="replicas: 2, autoscale: {up_outstanding: 8, down_outstanding: 1, "
                                    "min_replicas: 1, max_replicas: 3, interval_s: 1}"))
    assert run_json("simulate", "--scenario", str(f), "--system", "h200")["completed"] == 50


def test_an_autoscaled_simulation_without_replicas_starts_within_its_bounds(run_json, tmp_path):
    """No replicas given: the run starts at min_replicas (or the planned count within the bounds), not at 1 below
    the minimum (refused for a while this stop, as if the user had given 1)."""
    from clusterfit.sim.api import parse_simulation

    assert parse_simulation({"autoscale": {"min_replicas": 4, "max_replicas": 6}}).replicas == 4
    f = tmp_path / "s.yaml"
    f.write_text(_AUTOSCALED.format(section="autoscale: {min_replicas: 4, max_replicas: 6}"))
    assert 4 <= run_json("simulate", "--scenario", str(f), "--system", "h200")["replicas"] <= 6


def test_simulate_refuses_lengths_over_an_agent_scenario(run_cli):
    """--isl over a scenario whose agent section defines the turns ran fixed-length requests and dropped the
    sessions without a word (plan refused it); simulate refuses it the same way."""
    code, out, err = run_cli("simulate", "--scenario", "examples/agent-sessions.yaml", "--system", "h200", "--rate",
                             "2", "--requests", "200", "--isl", "500")
    assert code == 2 and err.startswith("error: --isl: scenario file examples/agent-sessions.yaml has an agent "
                                        "section (workload.agent)"), err


def test_a_replicas_option_outside_the_scenario_autoscale_bounds_names_it(run_cli, tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("model: meta-llama/Llama-3.1-8B\nsystems: [hgx_h200]\n"
                 "workload: {isl: 1000, osl: 200, load: {requests_per_s: 5}}\n"
                 "simulation: {requests: 300, replicas: 4, autoscale: {min_replicas: 2, max_replicas: 6}}\n")
    code, out, err = run_cli("simulate", "--scenario", str(f), "--replicas", "8")
    assert code == 2 and err.startswith("error: --replicas: 8 is outside the simulation's autoscale bounds"), err


def test_a_simulation_section_replacing_the_workload_is_noted(run_json, tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("model: meta-llama/Llama-3.1-8B\nsystems: [hgx_h200]\n"
                 "workload: {isl: 1000, osl: 200, load: {requests_per_s: 5}}\n"
                 "simulation: {requests: 100, replicas: 1, arrival: {process: poisson, rate_rps: 50}}\n")
    notes = run_json("simulate", "--scenario", str(f))["notes"]
    assert [n for n in notes if n.startswith("the scenario's simulation section sets simulation.arrival.rate_rps "
                                             "(50 requests/s)")]


_SCALED_RUN = ("model: llama-3.1-8b\nsystems: [h200]\nworkload: {{isl: 1000, osl: 200, load: {{requests_per_s: 40}}}}\n"
               "simulation: {{replicas: 2, requests: 3000, autoscale: {{interval_s: 60, up_outstanding: 20, "
               "down_outstanding: 2, min_replicas: 1, max_replicas: 4, startup_s: {startup}}}}}\n")


@pytest.mark.parametrize("startup", [10, 30])
def test_autoscaling_gpu_hours_end_with_the_run(run_json, tmp_path, startup):
    """The autoscaling tick, rescheduled while work was left, ran after the last request finished (t = 120 s of a
    ~77 s run): a scale_down was logged there and 2 replicas were paid to 120 s, the scaled-up one from 60 s: 300
    GPU-s instead of ~172. A replica asked for at 60 s and not ready by the end is paid for up to the end."""
    f = tmp_path / "s.yaml"
    f.write_text(_SCALED_RUN.format(startup=startup))
    rep = run_json("simulate", "--scenario", str(f), "--system", "h200", "--gpus", "1")
    d = rep["duration_s"]
    assert 60 < d < 100
    assert [e["event"] for e in rep["events"]] == ["scale_up"] + (["scale_up_ready"] if startup == 10 else [])
    assert all(e["t_s"] <= d for e in rep["events"]) and rep["not_exercised"] == []
    assert rep["gpu_hours"] * 3600 == pytest.approx(2 * d + (d - 60), abs=0.1)


def test_short_mmpp_runs_keep_the_requested_rate():
    """mmpp started every run in its base state (burst 4x for 10% of the time, base 90 s dwells): 200 requests at
    8/s took 32.5 s on average over seeds, 6.1 requests/s. A run now starts at an arrival in the state an arrival
    sees in the long run, so the gaps average 1 / rate for any number of requests."""
    spec = ArrivalSpec(process="mmpp", rate_rps=8.0)
    spans = [arrival_times(spec, 200, np.random.default_rng(seed))[-1] for seed in range(2000)]
    assert 199 / np.mean(spans) == pytest.approx(8.0, rel=0.03)
    t = arrival_times(spec, 200, np.random.default_rng(0))
    assert t[0] == 0 and t.size == 200 and np.all(np.diff(t) >= 0)

