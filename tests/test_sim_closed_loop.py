"""A closed loop of clients in the simulator (sim.clients, ``simulate --concurrency``): each client sends its next
request when its last one ends, so the rate is what the replicas answer. Figures are checked against the loop's own
definition (sends follow ends exactly), Little's law, and perf's closed form for the same concurrency."""

from __future__ import annotations

import json

import numpy as np
import pytest

from clusterfit.compose import Catalog, build_replica
from clusterfit.engines import front_end_s
from clusterfit.sim import SimulationConfig, simulate
from clusterfit.sim.clients import next_turns
from clusterfit.sim.ledger import COMPLETED, REJECTED
from clusterfit.sim.requests import Requests

MODEL = "meta-llama/Llama-3.1-8B"
LOAD = ("meta-llama/Llama-3.1-8B-Instruct", "--system", "h200", "--isl", "1000", "--osl", "200")


@pytest.fixture(scope="module")
def step():
    return build_replica(Catalog.load([]), MODEL, "h200").step


def _in_flight(arrival: np.ndarray, finish: np.ndarray) -> int:
    """Most requests between their send and their (client-side) finish at once; a send at the very instant of a
    finish counts after it."""
    events = sorted([(t, 1) for t in arrival] + [(t, -1) for t in finish])
    now = most = 0
    for _, d in events:
        now += d
        most = max(most, now)
    return most


def test_next_turns_link_each_session_in_order():
    # sessions 7 and 3 interleaved, two lone requests (-1)
    assert next_turns(np.array([7, 3, -1, 7, 3, 7, -1])).tolist() == [3, 4, -1, 5, -1, -1, -1]


def test_one_client_sends_each_request_as_the_last_one_ends(step):
    """One client, think time 0.5 s: request k+1 goes out exactly 0.5 s after request k's answer reached the
    client (its finish, front-end latency included), and only one request is ever in flight."""
    cfg = SimulationConfig(requests=40, arrival={"concurrency": 1, "think_time_s": 0.5},
                           input={"dist": "fixed", "value": 500}, output={"dist": "fixed", "value": 50})
    report, run = simulate(step, cfg)
    req = run.requests
    assert report["completed"] == 40 and req["arrival_s"][0] == 0.0
    assert np.allclose(req["arrival_s"][1:], req["finish_s"][:-1] + 0.5, rtol=0, atol=1e-9)
    assert _in_flight(req["arrival_s"], req["finish_s"]) == 1
    loop = report["closed_loop"]
    assert (loop["clients"], loop["clients_asked"], loop["sessions"], loop["think_time_s"],
            loop["session_think_time_s"]) == (1, 1, 40, 0.5, None)
    assert loop["ramp_s"] > 0   # estimated (one client: its only request starts at 0 whatever the ramp)


def test_n_clients_hold_n_requests_in_flight_and_obey_littles_law(step):
    """16 clients starting at once (ramp 0): 16 sends at t = 0, never more than 16 in flight, and each client's
    requests back to back, so 16 = throughput x mean time in the system over the run up to the last send."""
    cfg = SimulationConfig(requests=800, arrival={"concurrency": 16, "ramp_s": 0},
                           input={"dist": "lognormal", "mean": 1000, "cv": 0.5},
                           output={"dist": "lognormal", "mean": 200, "cv": 0.5})
    report, run = simulate(step, cfg)
    req = run.requests
    assert report["completed"] == 800
    assert int((req["arrival_s"] == 0).sum()) == 16
    assert _in_flight(req["arrival_s"], req["finish_s"]) == 16
    # every request but the first 16 is sent at the instant another one's answer arrives
    sends = req["arrival_s"][16:]
    assert np.isin(np.round(sends, 9), np.round(req["finish_s"], 9)).all()
    # Little's law on the busy part of the run (all 16 clients in the system up to the last send)
    last = req["arrival_s"].max()
    in_system = np.clip(np.minimum(req["finish_s"], last) - req["arrival_s"], 0, None).sum()
    assert in_system / last == pytest.approx(16, rel=1e-6)


def test_sessions_send_each_turn_after_the_previous_answer(step):
    """Agent sessions in a closed loop: each session's turn k+1 goes out its think time (3 s) after that session's
    turn k answer, and a new session starts as one ends (think_time_s 0); with 4 clients, 4 sessions are open at
    once. Lengths vary, so the sessions' answers come at different times."""
    cfg = SimulationConfig(requests=120, arrival={"concurrency": 4},
                           input={"dist": "lognormal", "mean": 300, "cv": 0.5},
                           output={"dist": "lognormal", "mean": 40, "cv": 0.8},
                           sessions={"turns": 5, "think_time_s": 3.0,
                                     "new_tokens": {"dist": "lognormal", "mean": 20, "cv": 0.5}})
    report, run = simulate(step, cfg)
    req = run.requests
    assert report["completed"] == 120 and report["closed_loop"]["session_think_time_s"] == 3.0
    arrival, finish, key = req["arrival_s"], req["finish_s"], req["prefix_key"]
    ends = []
    for s in np.unique(key):
        turns = np.flatnonzero(key == s)   # in send order
        assert turns.size == 5
        assert np.allclose(arrival[turns[1:]], finish[turns[:-1]] + 3.0, rtol=0, atol=1e-9)
        ends.append(finish[turns[-1]])
    # every session after the first four starts as some session's last answer arrives
    starts = np.array([arrival[np.flatnonzero(key == s)[0]] for s in np.unique(key)])
    later = np.sort(starts)[4:]
    assert all(np.isclose(t, ends, rtol=0, atol=1e-9).any() for t in later)
    assert _in_flight(starts, np.array(ends)) == 4   # sessions open at once, from first send to last answer


def test_a_rejected_request_does_not_stall_its_client(step):
    """A request longer than the KV cache is rejected when sent; its client goes on with the next one at once."""
    too_long = int(step.kv_capacity_tokens) * 2
    reqs = Requests.build(np.zeros(5), [100, too_long, 100, 100, 100], [10, 10, 10, 10, 10])
    report, run = simulate(step, SimulationConfig(arrival={"concurrency": 1}), requests=reqs)
    status = run.requests["status"]
    assert (status == REJECTED).sum() == 1 and (status == COMPLETED).sum() == 4
    arrival = run.requests["arrival_s"]
    rejected = int(np.flatnonzero(status == REJECTED)[0])
    # the rejection answers at its send; the next request goes out one front-end latency later
    assert arrival[rejected + 1] == pytest.approx(arrival[rejected] + front_end_s(step), abs=1e-9)


def test_the_same_seed_gives_the_same_run(step):
    cfg = SimulationConfig(requests=300, seed=7, arrival={"concurrency": 8},
                           input={"dist": "lognormal", "mean": 800, "cv": 1.0},
                           output={"dist": "lognormal", "mean": 100, "cv": 1.0})
    a, b = simulate(step, cfg)[1].requests, simulate(step, cfg)[1].requests
    assert all(np.array_equal(a[k], b[k], equal_nan=True) for k in a)


@pytest.mark.parametrize("clients", [16, 64])
def test_simulate_agrees_with_perfs_closed_form(run_json, clients):
    """perf --concurrency N costs a closed loop in closed form (serving.running_batch, cycle_s); the simulator
    replays one request by request with varied lengths (length CV 0.5, the clients spread over a cycle). Measured
    here, simulated vs perf: output tokens/s 1,969 vs 1,964 (16 clients), 4,052 vs 4,085 (64); TPOT 7.86 vs 8.15 ms,
    15.06 vs 15.67 ms."""
    perf = run_json("perf", *LOAD, "--concurrency", str(clients))
    sim = run_json("simulate", *LOAD, "--concurrency", str(clients), "--length-cv", "0.5", "--requests", "3000")
    assert sim["closed_loop"]["clients"] == clients
    assert sim["throughput"]["output_tokens_per_s"] == pytest.approx(perf["output_tokens_per_s"], rel=0.03)
    assert sim["tpot_s"]["mean"] == pytest.approx(perf["tpot_s"], rel=0.06)


def test_a_scenario_load_of_concurrent_sessions_runs_closed(run_cli):
    """The shipped agent example (300 concurrent sessions) simulates as a closed loop with no rate given (it was
    refused: 'a load of concurrent sessions is a closed loop; ... give simulation.arrival.rate_rps')."""
    code, out, err = run_cli("simulate", "--scenario", "examples/agent-sessions.yaml", "--system", "hgx_h200",
                             "--requests", "12000")
    assert code == 0, err
    assert "closed loop: 300 clients starting over the first" in out
    assert "a session's next turn 4 s after its answer" in out and "over 300 clients is" not in out
    # 2,000 requests are 167 sessions of 12 turns: 167 clients run, and the run says its figures are its start
    code, out, err = run_cli("simulate", "--scenario", "examples/agent-sessions.yaml", "--system", "hgx_h200",
                             "--requests", "2000", "--json")
    assert code == 0, err
    report = json.loads(out)
    loop = report["closed_loop"]
    assert (loop["clients"], loop["clients_asked"], loop["sessions"]) == (167, 300, 167)
    assert ("167 of the 300 clients run, one per session: the 2,000 requests make 167 sessions; give more requests "
            "(--requests; at least 3 per client)") in report["notes"], report["notes"]
    # 10,000 requests are 834 sessions: all 300 clients run, 33 requests each, and nothing is noted
    code, out, err = run_cli("simulate", "--scenario", "examples/agent-sessions.yaml", "--system", "hgx_h200", "--json")
    assert code == 0 and json.loads(out)["notes"] == [], err


@pytest.mark.parametrize("extra, message", [
    (("--concurrency", "4", "--rate", "2"), "error: --concurrency: give --rate (an open loop) or --concurrency (a "
                                            "closed loop), not both"),
    (("--concurrency", "0"), "error: --concurrency: must be an integer in 1..5,000,000, got 0"),
    (("--think-time-s", "2"), "error: --think-time-s: times a closed loop's clients: give --concurrency"),
    (("--ramp-s", "1", "--rate", "3"), "error: --ramp-s: times a closed loop's clients: --rate / --arrival make "
                                       "this run an open loop"),
    (("--concurrency", "3", "--arrival", "gamma"), "error: --arrival: shapes open-loop arrivals; a closed loop "
                                                   "(--concurrency) sends a request as one ends"),
    (("--concurrency", "3", "--think-time-s", "-1"), "error: --think-time-s: must be a number in 0.0..86,400.0"),
])
def test_closed_loop_usage_errors_name_the_option(run_cli, extra, message):
    code, out, err = run_cli("simulate", MODEL, "--system", "h200", "--isl", "100", "--osl", "20", *extra)
    assert code == 2 and message in err and err.count("error:") == 1, err


@pytest.mark.parametrize("arrival, message", [
    ("{concurrency: 3, rate_rps: 2}", "simulation: arrival: give rate_rps (an open loop) or concurrency (a closed "
                                      "loop), not both"),
    ("{concurrency: 3, process: mmpp}", "simulation: arrival: process shapes open-loop arrivals"),
    ("{think_time_s: 1}", "simulation.arrival.think_time_s: times a closed loop's clients, but this run is an open "
                          "loop (give simulation.arrival.concurrency, or a load of concurrent sessions)"),
    ("{rate_rps: 2, ramp_s: 0}", "simulation.arrival.ramp_s: times a closed loop's clients, but this run is an open "
                                 "loop"),
])
def test_a_scenarios_closed_loop_errors_name_file_and_field(run_cli, tmp_path, arrival, message):
    scen = tmp_path / "s.yaml"
    scen.write_text("model: llama-3.1-8b\nsystems: [h200]\nworkload: {isl: 100, osl: 10, load: {requests_per_s: 5}}\n"
                    f"simulation: {{requests: 20, arrival: {arrival}}}\n")
    code, _, err = run_cli("simulate", "--scenario", str(scen), "--gpus", "1")
    assert code == 2 and f"error: scenario file {scen}: {message}" in err, err


def test_a_think_time_in_a_scenario_of_concurrent_sessions_is_the_loops(run_cli, tmp_path):
    """With a load of concurrent sessions the section's think_time_s times that closed loop (it is refused beside
    an open-loop load, above)."""
    scen = tmp_path / "s.yaml"
    scen.write_text("model: llama-3.1-8b\nsystems: [h200]\nworkload: {isl: 100, osl: 10, load: {concurrent_sessions: "
                    "5}}\nsimulation: {requests: 30, arrival: {think_time_s: 1}}\n")
    code, out, err = run_cli("simulate", "--scenario", str(scen), "--gpus", "1")
    assert code == 0, err
    assert "closed loop: 5 clients" in out and "(1 s later)" in out


@pytest.mark.parametrize("clients", [16, 64, 256])
def test_the_default_ramp_is_about_one_request_cycle(step, clients):
    """The clients start over about one request's time in the system (Cluster._closed_cycle_s): measured here
    1.71 s against a mean end-to-end of 1.63 s (16 clients), 3.11 vs 3.11 s (64), 9.95 vs 9.49 s (256)."""
    cfg = SimulationConfig(requests=3000, arrival={"concurrency": clients},
                           input={"dist": "fixed", "value": 1000}, output={"dist": "fixed", "value": 200})
    report, _ = simulate(step, cfg)
    assert report["closed_loop"]["ramp_s"] == pytest.approx(report["e2e_s"]["mean"], rel=0.25)


def test_too_few_requests_per_client_are_noted(run_cli):
    """A closed loop whose clients send a request or two each is mostly its start: the run says so."""
    code, out, err = run_cli("simulate", MODEL, "--system", "h200", "--isl", "500", "--osl", "50", "--concurrency",
                             "100", "--requests", "150")
    assert code == 0, err
    assert "150 requests over 100 clients is 1.5 each: the run is mostly the clients' start" in out.replace("\n", " ")
    code, out, _ = run_cli("simulate", MODEL, "--system", "h200", "--isl", "500", "--osl", "50", "--concurrency",
                           "100", "--requests", "300")
    assert code == 0 and "requests over 100 clients" not in out.replace("\n", " ")


def test_a_closed_loop_that_loses_its_only_replica_fails_its_requests(step):
    """The only replica lost for good: the requests held for it fail, their clients send the rest, which fail in
    turn; every request ends (it was 'internal error: 94 requests neither completed, rejected nor failed')."""
    cfg = SimulationConfig(requests=100, arrival={"concurrency": 4}, failures=[{"at_s": 0.5, "replica": 0}],
                           input={"dist": "fixed", "value": 500}, output={"dist": "fixed", "value": 50})
    report, _ = simulate(step, cfg)
    assert report["completed"] + report["failed"] == 100 and report["failed"] > 90


def _scenario(tmp_path, load: str, simulation: str = "") -> str:
    scen = tmp_path / "s.yaml"
    scen.write_text(f"model: llama-3.1-8b\nsystems: [h200]\nworkload: {{isl: 100, osl: 10, load: {load}}}\n"
                    + (f"simulation: {simulation}\n" if simulation else ""))
    return str(scen)


def test_a_trace_of_a_concurrent_sessions_scenario_keeps_its_arrivals(run_cli, tmp_path):
    """A trace brings its own arrivals: a load of concurrent sessions does not turn its replay into a closed loop
    (section or --trace)."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n" + "".join(f"{k},100,10\n" for k in range(6)))
    scen = _scenario(tmp_path, "{concurrent_sessions: 3}", f"{{trace: {trace}}}")
    for extra in ((), ("--trace", str(trace))):
        code, out, err = run_cli("simulate", "--scenario", scen, "--gpus", "1", "--json", *extra)
        assert code == 0, err
        report = json.loads(out)
        assert "closed_loop" not in report and report["duration_s"] > 5.0   # the trace's six arrivals, 1 s apart


def test_an_open_loop_shape_beside_concurrent_sessions_asks_for_a_rate(run_cli, tmp_path):
    """A section (or --arrival) shaping an open loop beside a load of concurrent sessions: plan still plans (the
    section is checked as written), simulate asks for the open loop's rate, naming --rate."""
    scen = _scenario(tmp_path, "{concurrent_sessions: 20}", "{arrival: {process: gamma, cv: 3}}")
    code, _, err = run_cli("plan", "--scenario", scen)
    assert code == 0, err
    code, _, err = run_cli("simulate", "--scenario", scen, "--gpus", "1")
    assert code == 2 and ("error: --rate: a load of concurrent sessions runs as a closed loop of that many clients, "
                          "but the arrival process is an open loop's (process, cv): give its rate") in err, err
    plain = _scenario(tmp_path, "{concurrent_sessions: 20}")
    code, _, err = run_cli("simulate", "--scenario", plain, "--gpus", "1", "--arrival", "gamma")
    assert code == 2 and "error: --rate: a load of concurrent sessions runs as a closed loop" in err, err
    code, _, err = run_cli("simulate", "--scenario", plain, "--gpus", "1", "--arrival", "gamma", "--think-time-s", "1")
    assert code == 2 and ("error: --think-time-s: times a closed loop's clients: --rate / --arrival make this run an "
                          "open loop") in err, err
    code, out, err = run_cli("simulate", "--scenario", plain, "--gpus", "1", "--arrival", "gamma", "--rate", "3",
                             "--json")
    assert code == 0 and "closed_loop" not in json.loads(out), err


def test_plan_verify_refuses_a_closed_loops_timing_in_an_open_loop_before_the_search(run_cli, tmp_path):
    """--verify checks the section against the load planned, options included: a think time in an open loop is
    refused before the search; a load of concurrent sessions given as an option makes it the loop's. Without
    --verify the section is not run, and its think time is no error."""
    scen = _scenario(tmp_path, "{requests_per_s: 5}", "{arrival: {think_time_s: 2}}")
    code, _, err = run_cli("plan", "--scenario", scen, "--verify")
    assert code == 2 and (f"error: scenario file {scen}: simulation.arrival.think_time_s: times a closed loop's "
                          "clients, but this run is an open loop") in err, err
    code, _, err = run_cli("plan", "--scenario", scen)
    assert code == 0, err
    code, out, err = run_cli("plan", "--scenario", scen, "--concurrency", "20", "--no-disagg", "--verify",
                             "--verify-requests", "500", "--json")
    assert code == 0, err
    loop = json.loads(out)["verify"]["closed_loop"]
    assert loop["clients"] == 20 and loop["think_time_s"] == 2.0


def test_plan_verify_runs_concurrent_sessions_closed_when_aggregated(run_json):
    """An aggregated plan for 200 concurrent sessions is verified by a closed loop of 200 clients."""
    plan = run_json("plan", MODEL, "--isl", "1000", "--osl", "200", "--concurrency", "200", "--system", "h200",
                    "--ttft-ms", "1000", "--tpot-ms", "30", "--no-disagg", "--verify", "--verify-requests", "2000")
    loop = plan["verify"]["closed_loop"]
    assert loop["clients"] == loop["clients_asked"] == 200 and plan["verify"]["completed"] == 2000


def test_plan_verify_of_a_disaggregated_plan_skips_a_sections_closed_loop(run_json, tmp_path):
    """The simulator runs a closed loop for aggregated serving only: a disaggregated plan whose scenario asks for
    one stands unverified, with the reason (it was a stop of the whole plan, exit 2)."""
    scen = tmp_path / "agent.yaml"
    text = open("examples/agent-sessions.yaml").read()
    scen.write_text(text + "simulation: {arrival: {concurrency: 50}}\n")
    plan = run_json("plan", "--scenario", str(scen), "--verify", "--verify-requests", "1000")
    assert plan["recommended"]["xPyD"], plan["recommended"]   # the example's plan is disaggregated
    assert plan["verify"]["simulated"] is False and "aggregated serving only" in plan["verify"]["reason"]


def test_plan_verify_of_an_agent_load_with_its_own_inputs_is_not_divided_by_turns(run_json, tmp_path):
    """An agent workload (10 turns) whose simulation section gives its own input lengths and a gamma process: the
    requests are independent, so --verify replays them open loop at the plan's request rate, not at a tenth of it
    (it simulated 1.18 requests/s against the plan's 11.6)."""
    scen = tmp_path / "ag.yaml"
    scen.write_text("model: meta-llama/Llama-3.1-8B\nsystems: [hgx_h200]\nworkload:\n  agent: {shared_prefix_tokens: "
                    "2000, turns: 10, input_tokens_per_turn: 600, output_tokens_per_turn: 200, think_time_s: 2}\n"
                    "  load: {concurrent_sessions: 100}\nslo: {ttft_ms: 3000, tpot_ms: 40}\nsimulation:\n"
                    "  arrival: {process: gamma, cv: 1.5}\n  input: {dist: fixed, value: 3000}\n")
    plan = run_json("plan", "--scenario", str(scen), "--verify", "--verify-requests", "3000", "--no-disagg")
    v = plan["verify"]
    assert "closed_loop" not in v
    assert v["throughput"]["requests_per_s"] == pytest.approx(v["plan_predicted"]["requests_per_s"], rel=0.1)


def test_a_timing_option_beside_too_many_sessions_names_the_option(run_cli, tmp_path):
    """6,000,000 concurrent sessions are more clients than one simulation runs: the run is open loop, and
    --think-time-s is refused naming the option (it named a scenario field the file does not have)."""
    scen = _scenario(tmp_path, "{concurrent_sessions: 6000000}")
    code, _, err = run_cli("simulate", "--scenario", scen, "--gpus", "1", "--think-time-s", "1")
    assert code == 2 and err.startswith("error: --think-time-s: times a closed loop's clients: give --concurrency"), err
    code, _, err = run_cli("simulate", "--scenario", scen, "--gpus", "1")
    assert code == 2 and ("error: --rate: 6,000,000 concurrent sessions are more clients than one simulation runs "
                          "(5,000,000)") in err, err


def test_audit_bounds_and_notes(run_cli, run_json, tmp_path):
    """Found by an audit of this session's surfaces: a session of 1e300 mean turns hung the request generator (its
    turn counts overflowed), a shared prefix of 1e11 tokens ran with a ramp of 2e13 s; a trace replayed by a closed
    loop dropped its arrival times without a word; '1 clients'."""
    scen = _scenario(tmp_path, "{concurrent_sessions: 4}", "{requests: 50, sessions: {turns_mean: 1.0e+300}}")
    code, _, err = run_cli("simulate", "--scenario", scen, "--gpus", "1")
    assert code == 2 and "simulation: sessions.turns_mean: Input should be less than or equal to 5000000" in err, err
    scen = _scenario(tmp_path, "{concurrent_sessions: 4}", "{requests: 50, sessions: {shared_prefix_tokens: 1.0e+11}}")
    code, _, err = run_cli("simulate", "--scenario", scen, "--gpus", "1")
    assert code == 2 and "sessions.shared_prefix_tokens: Input should be less than or equal to 100000000" in err, err
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n" + "".join(f"{k},100,10\n" for k in range(6)))
    report = run_json("simulate", MODEL, "--system", "h200", "--trace", str(trace), "--concurrency", "1")
    assert report["notes"] == ["the trace's arrival times are not used: a closed loop of 1 client sends its requests "
                               "in their order, each as one ends"]
    code, out, _ = run_cli("simulate", MODEL, "--system", "h200", "--trace", str(trace), "--concurrency", "1")
    assert code == 0 and "closed loop: 1 client starting" in out


def test_plan_verify_says_what_it_simulated_other_than_the_planned_load(run_json, tmp_path):
    """--verify's note: the scenario's own arrivals (not the planned load), a closed loop of fewer clients or too few
    requests each (naming --verify-requests), an open loop in place of a disaggregated plan's sessions (the section's
    think time unused). Absent when it simulated the planned load."""
    few = run_json("plan", MODEL, "--isl", "1000", "--osl", "200", "--concurrency", "3000", "--system", "h200",
                   "--ttft-ms", "2000", "--tpot-ms", "50", "--no-disagg", "--verify", "--verify-requests", "300")
    assert "300 of the 3,000 clients run" in few["verify"]["note"]
    assert "give more requests (--verify-requests; at least 3 per client)" in few["verify"]["note"]
    own = _scenario(tmp_path, "{requests_per_s: 5}", "{requests: 200, arrival: {concurrency: 8}}")
    plan = run_json("plan", "--scenario", own, "--verify", "--no-disagg")
    assert plan["verify"]["note"] == ("the scenario's simulation section gives its own arrivals (concurrency 8 "
                                      "clients): the check simulates those in place of the planned load")
    one = _scenario(tmp_path, "{requests_per_s: 5}", "{requests: 200, arrival: {concurrency: 1}}")
    assert "(concurrency 1 client)" in run_json("plan", "--scenario", one, "--verify", "--no-disagg")["verify"]["note"]
    agent = tmp_path / "agent.yaml"
    agent.write_text(open("examples/agent-sessions.yaml").read() + "simulation: {arrival: {think_time_s: 30}}\n")
    plan = run_json("plan", "--scenario", str(agent), "--verify", "--verify-requests", "1000")
    note = plan["verify"]["note"]
    assert plan["recommended"]["xPyD"] and "simulated open loop at the rate the plan derived from them (" in note
    assert " sessions/s, " in note and " requests/s): a disaggregated plan's pools" in note   # 12-turn sessions
    assert "the section's think_time_s 30 s is a closed loop's, not used here" in note
    # the same sections on an aggregated plan time its closed loop: said, as the plan assumes the agent's 4 s
    plan = run_json("plan", "--scenario", str(agent), "--verify", "--verify-requests", "12000", "--no-disagg")
    assert plan["verify"]["note"] == ("the section's think_time_s 30 s time the 300 clients; the plan's rate assumes "
                                      "the workload's think time and a steady loop")
    plain = run_json("plan", MODEL, "--isl", "1000", "--osl", "200", "--concurrency", "200", "--system", "h200",
                     "--no-disagg", "--verify", "--verify-requests", "2000")
    assert "note" not in plain["verify"]


def test_plan_verify_warns_when_an_open_loop_of_sessions_never_reaches_the_planned_load(run_json, tmp_path):
    """6,000,000 agent sessions of 4 turns, 3,000 s apart, replayed open loop with 5,000 requests: about 1,250
    sessions arrive in 2.5 s (500 sessions/s), and their later turns come 3,000 s apart, so the run never carries
    the planned 2,000 requests/s; the note said only 'at the rate the plan derived'."""
    scen = tmp_path / "big.yaml"
    scen.write_text("model: meta-llama/Llama-3.1-8B\nsystems: [hgx_h200]\nworkload:\n  agent: {turns: 4, "
                    "shared_prefix_tokens: 0, input_tokens_per_turn: 100, output_tokens_per_turn: 20, think_time_s: "
                    "3000}\n  load: {concurrent_sessions: 6000000}\nslo: {ttft_ms: 3000, tpot_ms: 60}\n")
    note = run_json("plan", "--scenario", str(scen), "--verify", "--verify-requests", "5000",
                    "--no-disagg")["verify"]["note"]
    assert "(500 sessions/s, 2000 requests/s): 6,000,000 sessions are more clients than one simulation runs" in note
    # 4 turns are 3 gaps of 3,000 s (the note said 12,000 s, and rounded the 2.5 s window to 3 s)
    assert ("the 5,000 requests make about 1,250 sessions arriving over 2.5 s, shorter than a session's 9,000 s of "
            "think time between its turns: the run never reaches the planned load") in note


def test_a_sections_rate_kept_under_arrival_is_noted_in_sessions_per_second(run_json, tmp_path):
    """--arrival reshapes the section's rate but keeps it: the note still names it (it was dropped), in sessions/s
    where the requests come in sessions."""
    scen = _scenario(tmp_path, "{requests_per_s: 5}", "{requests: 100, arrival: {rate_rps: 50}}")
    notes = run_json("simulate", "--scenario", scen, "--gpus", "1", "--arrival", "gamma")["notes"]
    assert any("simulation.arrival.rate_rps (50 requests/s)" in n for n in notes), notes
    agent = tmp_path / "agent.yaml"
    agent.write_text(open("examples/agent-sessions.yaml").read() + "simulation: {requests: 600, arrival: "
                     "{rate_rps: 2}}\n")
    notes = run_json("simulate", "--scenario", str(agent), "--system", "hgx_h200")["notes"]
    assert any("simulation.arrival.rate_rps (2 sessions/s)" in n for n in notes), notes
