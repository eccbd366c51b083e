"""`clusterfit simulate` inputs the fuzzing pass found read wrongly: traces (booleans, repeated columns, prompts of
0 tokens), failures outside the run or naming no option, output paths naming no option, what a scenario ran."""

from __future__ import annotations

import json

import pytest

#: A small trace-driven simulate run; the trace file is added by each test.
TRACE_RUN = ("simulate", "meta-llama/Llama-3.1-8B", "--system", "hgx_h200", "--replicas", "1")


def _one_error(code: int, err: str) -> str:
    """The one error line of a run that must exit 2."""
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return " ".join(err.split())


@pytest.mark.parametrize("name, text, match", [
    # a JSON true was read as 1 token (README: true / false are never read as 1 / 0)
    ("t.jsonl", '{"arrival_s": 0, "input_tokens": 5, "output_tokens": 5}\n'
                '{"arrival_s": 1, "input_tokens": true, "output_tokens": 5}\n',
     "t.jsonl:2: input tokens must be a number of tokens, got true"),
    ("t.jsonl", '{"arrival_s": 0, "input_tokens": 5, "output_tokens": false}\n',
     "t.jsonl:1: output tokens must be a number of tokens, got false"),
    ("t.jsonl", '{"arrival_s": true, "input_tokens": 5, "output_tokens": 5}\n', "t.jsonl:1: arrival time"),
    # a key given twice: json.loads kept the last value
    ("t.jsonl", '{"arrival_s": 0, "input_tokens": 5, "input_tokens": 7, "output_tokens": 5}\n',
     "t.jsonl:1: key 'input_tokens' is given twice"),
    # a header that repeats a column: the row dict kept the last one silently
    ("t.csv", "arrival_s,input_tokens,output_tokens,arrival_s\n0,5,5,9\n",
     "t.csv:1: column 'arrival_s' is named twice (columns 1 and 4)"),
    ("t.csv", "Input_Tokens,arrival_s,input_tokens,output_tokens\n5,0,5,5\n",
     "t.csv:1: column 'input_tokens' is named twice (columns 1 and 3)"),
    # a prompt of 0 tokens was run as 1 token; it is not a request
    ("t.csv", "arrival_s,input_tokens,output_tokens\n0,5,5\n1,0,5\n",
     "t.csv:3: input tokens must be at least 1 (a prompt of 0 tokens is not a request), got '0'"),
    ("t.csv", "arrival_s,input_tokens,output_tokens\n0,0.4,5\n", "t.csv:2: input tokens must be at least 1"),
    ("t.jsonl", '{"arrival_s": 0, "input_tokens": 0, "output_tokens": 5}\n', "t.jsonl:1: input tokens must be at"),
])
def test_bad_trace_values_are_refused_naming_file_line_and_field(run_cli, tmp_path, name, text, match):
    path = tmp_path / name
    path.write_text(text)
    msg = _one_error(*run_cli(*TRACE_RUN, "--trace", str(path))[::2])
    assert match in msg, msg


def test_zero_output_tokens_still_run_as_one_token(run_json, tmp_path):
    """BurstGPT logs failed requests with 0 response tokens: they stay requests of one output token (documented in
    sim/trace_files.py and the README), and fractional counts are rounded."""
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,input_tokens,output_tokens\n0,100,0\n0.5,99.6,3.4\n")
    rep = run_json(*TRACE_RUN, "--trace", str(path), "--requests-csv", str(tmp_path / "r.csv"))
    assert rep["requests"] == rep["completed"] == 2
    rows = (tmp_path / "r.csv").read_text().splitlines()
    header = rows[0].split(",")
    got = [dict(zip(header, r.split(","))) for r in rows[1:]]
    assert [(int(r["input_tokens"]), int(r["output_tokens"])) for r in got] == [(100, 1), (100, 3)]


#: A small generated simulate run of two one-GPU replicas the failure cases add options to.
TWO = ("simulate", "llama-3.1-8b", "--system", "h200", "--gpus", "1", "--isl", "100", "--osl", "10", "--rate", "5",
       "--requests", "20", "--replicas", "2")


@pytest.mark.parametrize("extra, match", [
    (("--fail-at", "5", "--fail-replica", "2"), "error: --fail-replica: replica 2 does not exist: there are 2 "
                                                "replicas, 0 to 1"),
    (("--fail-at", "5", "--fail-node", "1"), "error: --fail-node: node 1 does not exist: 2 replicas of 1 GPU use 1 "
                                             "node (node 0) of 8 GPUs"),
])
def test_a_failure_outside_the_cluster_names_its_option(run_cli, extra, match):
    """'failure names replica 2, but there are 2' named no option (and HTTP answered "parameter": null)."""
    assert match in _one_error(*run_cli(*TWO, *extra)[::2])


@pytest.mark.parametrize("name, value", [("fail_replica", {"fail_replica": 2}), ("fail_node", {"fail_node": 1})])
def test_a_failure_outside_the_cluster_is_a_parameter_error(name, value):
    """What /api/simulate answers with: the error's parameter (the HTTP body's "parameter") names the field."""
    import clusterfit as cf
    from clusterfit.errors import ParameterError

    with pytest.raises(ParameterError) as info:
        cf.simulate(model="llama-3.1-8b", system="h200", gpus=1, isl=100, osl=10, rate=5, requests=20, replicas=2,
                    fail_at=5, **value)
    assert info.value.parameter == name and "does not exist" in str(info.value)


def _scenario(tmp_path, failures: str, extra: str = ""):
    scen = tmp_path / "s.yaml"
    scen.write_text("model: llama-3.1-8b\nsystems: [h200]\nworkload: {isl: 100, osl: 10, load: {requests_per_s: 5}}\n"
                    f"simulation:\n  replicas: 2\n  requests: 20\n  failures: {failures}\n{extra}")
    return scen


@pytest.mark.parametrize("failures, match", [
    ("[{at_s: 1, replica: 5}]", "simulation.failures.0.replica: replica 5 does not exist: there are 2 replicas"),
    ("[{at_s: 1, replica: 0}, {at_s: 2, node: 3}]", "simulation.failures.1.node: node 3 does not exist"),
])
def test_a_scenario_failure_outside_the_cluster_names_file_and_field(run_cli, tmp_path, failures, match):
    scen = _scenario(tmp_path, failures)
    msg = _one_error(*run_cli("simulate", "--scenario", str(scen), "--gpus", "1")[::2])
    assert f"error: scenario file {scen}: {match}" in msg, msg
    # the options' own failure comes after the scenario's: a bad scenario entry is still the scenario's
    msg = _one_error(*run_cli("simulate", "--scenario", str(scen), "--gpus", "1", "--fail-at", "1")[::2])
    assert f"scenario file {scen}: simulation.failures." in msg, msg


#: The fuzzing pass's run: it ends at ~70 s.
SEVENTY = ("simulate", "llama-3.1-8b", "--system", "h200", "--isl", "500", "--osl", "100", "--rate", "5",
           "--requests", "300", "--replicas", "2")


def test_a_failure_after_the_last_request_is_not_exercised_and_says_so(run_cli, run_json):
    """--fail-at 100000 of a 70 s run listed 't=100000.0 s: replica_lost (replica 0)' as if it happened, and ran
    the cluster (and its GPU-hours) on to t = 100,000 s: 55.6 GPU-hours instead of 0.04."""
    plain = run_json(*SEVENTY)
    late = run_json(*SEVENTY, "--fail-at", "100000")
    assert late["events"] == [] and plain["not_exercised"] == []
    (ev,) = late["not_exercised"]
    assert ev["t_s"] == 100000 and ev["event"] == "replica_lost" and ev["replica"] == 0
    assert "falls after the last request finished" in ev["note"] and "not exercised" in ev["note"]
    assert late["gpu_hours"] == pytest.approx(plain["gpu_hours"]) and late["duration_s"] == plain["duration_s"]
    code, out, err = run_cli(*SEVENTY, "--fail-at", "100000")
    text = " ".join(out.split())
    assert code == 0 and "The failure of replica 0 at t=100,000.0 s falls after the last request finished" in text
    assert "t=100000.0 s: replica_lost" not in text


def test_a_restart_after_the_last_request_is_not_exercised(run_json):
    rep = run_json(*SEVENTY, "--fail-at", "30", "--restart-after", "100000")
    assert [e["event"] for e in rep["events"]] == ["replica_lost"]
    assert [(e["event"], e["t_s"]) for e in rep["not_exercised"]] == [("replica_restarted", 100030)]
    assert rep["duration_s"] < 100


def test_a_failure_in_a_lull_before_the_last_arrival_is_exercised(run_json, tmp_path):
    """Idle replicas between arrivals still fail: only what falls after the last request is left out."""
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,input_tokens,output_tokens\n0,100,5\n100,100,5\n")
    rep = run_json("simulate", "llama-3.1-8b", "--system", "h200", "--trace", str(path), "--replicas", "2",
                   "--fail-at", "50", "--restart-after", "10")
    assert [e["event"] for e in rep["events"]] == ["replica_lost", "replica_restarted"]
    assert rep["not_exercised"] == [] and rep["completed"] == 2


def test_a_scenario_failure_after_the_run_is_not_exercised(run_json, tmp_path):
    scen = _scenario(tmp_path, "[{at_s: 1, replica: 1}, {at_s: 90000, node: 0, restart_s: 5}]")
    rep = run_json("simulate", "--scenario", str(scen), "--gpus", "1")
    assert [e["event"] for e in rep["events"]] == ["replica_lost"]
    # replica 1, lost at 1 s and never restarted, is not lost again
    assert [(e["replica"], e.get("cause")) for e in rep["not_exercised"]] == [(0, "node 0")]


@pytest.mark.parametrize("args, match", [
    # 'output nodir/x.png: the folder nodir does not exist' did not say which option
    (("simulate", "llama-3.1-8b", "--system", "h200", "--isl", "5", "--osl", "5", "--rate", "1", "--requests", "5",
      "--plot", "{d}/nodir/x.png"), "error: --plot: the folder {d}/nodir does not exist"),
    # 'output a.csv is given twice': given to which two?
    (("simulate", "llama-3.1-8b", "--system", "h200", "--isl", "5", "--osl", "5", "--rate", "1", "--requests", "5",
      "--csv", "{d}/a.csv", "--requests-csv", "{d}/a.csv"), "error: --requests-csv: {d}/a.csv is also given to --csv"),
    (("simulate", "llama-3.1-8b", "--system", "h200", "--trace", "{d}/t.csv", "--csv", "{d}/t.csv"),
     "error: --csv: {d}/t.csv is also an input (--trace); it would be overwritten"),
    (("simulate", "llama-3.1-8b", "--system", "h200", "--isl", "5", "--osl", "5", "--rate", "1", "--requests", "5",
      "--requests-csv", "{d}"), "error: --requests-csv: {d} is a directory; give a file name"),
    (("plan", "llama-3.1-8b", "--isl", "5", "--osl", "5", "--rate", "1", "--plot", "{d}/nodir/p.png"),
     "error: --plot: the folder {d}/nodir does not exist"),
    (("calibrate", "--out", "{d}/nodir/p.json"), "error: --out: the folder {d}/nodir does not exist"),
    (("bench", "http://127.0.0.1:9", "--requests", "1", "--isl", "5", "--osl", "5", "--csv", "{d}/nodir/b.csv"),
     "error: --csv: the folder {d}/nodir does not exist"),
])
def test_output_path_errors_name_their_option(run_cli, tmp_path, args, match):
    (tmp_path / "t.csv").write_text("arrival_s,input_tokens,output_tokens\n0,5,5\n")
    msg = _one_error(*run_cli(*(a.format(d=tmp_path) for a in args))[::2])
    assert match.format(d=tmp_path) in msg, msg


def test_a_scenario_run_says_which_precision_kv_dtype_layout_and_engine_it_simulated(run_cli, run_json, tmp_path):
    """A scenario listing two precisions and two KV dtypes simulated the first of each without saying so."""
    scen = tmp_path / "s.yaml"
    scen.write_text("model: llama-3.1-8b\nsystems: [h200]\nprecision: [bf16, fp8]\nkv_dtype: [bf16, fp8]\n"
                    "engine: sglang\nworkload: {isl: 100, osl: 10, load: {requests_per_s: 5}}\n"
                    "simulation: {replicas: 2, requests: 20}\n")
    rep = run_json("simulate", "--scenario", str(scen))
    assert (rep["engine"], rep["precision"], rep["kv_dtype"]) == ("sglang", "bf16", "bf16")
    assert rep["layout"] == {"tp": 1, "pp": 1, "ep": 1, "dp": 1} and rep["gpus_per_replica"] == 1
    assert any("precision bf16, fp8: simulated the first, bf16" in n for n in rep["notes"])
    assert any("kv_dtype bf16, fp8: simulated the first, bf16 (choose with --kv-dtype)" in n for n in rep["notes"])
    rep = run_json("simulate", "--scenario", str(scen), "--precision", "fp8", "--kv-dtype", "fp8", "--tp", "2")
    assert (rep["precision"], rep["kv_dtype"], rep["layout"]["tp"], rep["notes"]) == ("fp8", "fp8", 2, [])
    code, out, err = run_cli("simulate", "--scenario", str(scen), "--precision", "fp8", "--kv-dtype", "fp8",
                             "--tp", "2")
    assert code == 0 and "(TP2, sglang, fp8, KV fp8)" in " ".join(out.split()), out


def test_a_model_run_says_its_defaults(run_json):
    rep = run_json(*SEVENTY[:-4], "--requests", "20")
    assert (rep["engine"], rep["precision"], rep["kv_dtype"]) == ("vllm", "checkpoint", "bf16")
    assert rep["layout"]["tp"] == 1 and rep["notes"] == []
