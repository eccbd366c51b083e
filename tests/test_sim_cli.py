"""`clusterfit simulate`: MODEL and --scenario forms, JSON shape, outputs, errors."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

KEYS = {"requests", "completed", "rejected", "failed", "ttft_s", "tpot_s", "e2e_s", "goodput", "sim_wall_s"}


def test_model_form_json(run_cli):
    code, out, err = run_cli("simulate", "meta-llama/Llama-3.1-8B", "--system", "hgx_h200", "--isl", "1000",
                             "--osl", "200", "--rate", "30", "--replicas", "2", "--requests", "3000", "--seed", "3",
                             "--policy", "power_of_two", "--ttft-ms", "500", "--tpot-ms", "40", "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert KEYS <= set(rep)
    assert rep["requests"] == 3000 and rep["completed"] + rep["rejected"] + rep["failed"] == 3000
    assert set(rep["ttft_s"]) == {"p50", "p90", "p99", "mean"}
    assert 0 <= rep["goodput"] <= 1 and rep["policy"] == "power_of_two" and rep["gpus_per_replica"] == 1
    again = json.loads(run_cli("simulate", "meta-llama/Llama-3.1-8B", "--system", "hgx_h200", "--isl", "1000",
                               "--osl", "200", "--rate", "30", "--replicas", "2", "--requests", "3000", "--seed", "3",
                               "--policy", "power_of_two", "--ttft-ms", "500", "--tpot-ms", "40", "--json")[1])
    assert again["ttft_s"] == rep["ttft_s"] and again["e2e_s"] == rep["e2e_s"]


def test_failure_table_plot_and_csv(run_cli, tmp_path):
    pytest.importorskip("matplotlib")
    png, win, per = tmp_path / "sim.png", tmp_path / "win.csv", tmp_path / "req.csv"
    code, out, err = run_cli("simulate", "meta-llama/Llama-3.1-8B", "--system", "hgx_h200", "--isl", "800",
                             "--osl", "150", "--length-cv", "1", "--rate", "40", "--replicas", "4", "--requests",
                             "6000", "--fail-at", "60", "--restart-after", "30", "--plot", str(png), "--csv", str(win),
                             "--requests-csv", str(per))
    assert code == 0, err
    assert "replica_lost" in out and "replica_restarted" in out and "TTFT" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = list(csv.DictReader(win.open()))
    assert rows and {"t_s", "ttft_p99_s", "waiting", "kv_utilisation", "live_replicas"} <= set(rows[0])
    reqs = list(csv.DictReader(per.open()))
    assert len(reqs) == 6000 and {r["status"] for r in reqs} <= {"completed", "rejected", "failed"}


def test_scenario_form(run_cli, tmp_path):
    scen = tmp_path / "s.yaml"
    scen.write_text(
        "model: meta-llama/Llama-3.1-8B\nsystems: [hgx_h200]\nworkload:\n  isl: {mean: 1500, p50: 1000}\n"
        "  osl: 200\n  load: {requests_per_s: 20}\nslo: {ttft_ms: 1000, tpot_ms: 50}\n"
        "simulation:\n  replicas: 2\n  requests: 2000\n  policy: least_kv\n"
        "  arrival: {process: gamma, cv: 2}\n  failures: [{at_s: 30, replica: 1, restart_s: 20}]\n")
    code, out, err = run_cli("simulate", "--scenario", str(scen), "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["requests"] == 2000 and rep["replicas"] == 2 and rep["policy"] == "least_kv"
    assert rep["slo"]["ttft_s"] == pytest.approx(1.0) and isinstance(rep["holds_slo"], bool)
    assert [e["event"] for e in rep["events"]] == ["replica_lost", "replica_restarted"]
    code, out, err = run_cli("simulate", "--scenario", str(scen), "--replicas", "3", "--requests", "500", "--json")
    assert code == 0 and json.loads(out)["replicas"] == 3


def test_trace_form(run_cli):
    code, out, err = run_cli("simulate", "meta-llama/Llama-3.1-8B", "--system", "hgx_h200", "--trace",
                             "azure_conv_sample.csv", "--replicas", "2", "--json")
    assert code == 0, err
    assert json.loads(out)["requests"] == 2000


def test_requests_longer_than_the_kv_cache_are_rejected_and_said(run_cli):
    """A replica admits a request while prompt + output + one block fit in its KV cache less the watermark (vLLM's
    1%, sim.config.ReplicaSpec): 100,100 tokens do not fit in 20% of one H200, so every request is rejected, the
    report counts them apart and says so, and perf refuses the same request naming --isl."""
    base = ("meta-llama/Llama-3.1-8B", "--system", "hgx_h200", "--gpus", "1", "--gpu-memory-utilization", "0.2")
    code, out, err = run_cli("perf", *base, "--isl", "1000", "--osl", "100", "--concurrency", "1", "--json")
    assert code == 0, err
    capacity = json.loads(out)["kv_capacity_tokens"]
    assert capacity < 100_000 + 100
    sim = ("simulate", *base, "--isl", "100000", "--osl", "100", "--rate", "1", "--requests", "10")
    code, out, err = run_cli(*sim, "--json")
    assert code == 0, err
    rep = json.loads(out)
    assert rep["rejected"] == rep["rejected_too_long"] == 10 and rep["completed"] == 0
    assert rep["kv_admit_tokens"] == pytest.approx(capacity * 0.99, rel=1e-4)  # the simulator's own step model
    code, out, err = run_cli(*sim)
    assert code == 0 and "10 rejected requests need more KV cache than a replica admits" in " ".join(out.split())
    code, out, err = run_cli("perf", *base, "--isl", "100000", "--osl", "100", "--concurrency", "1")
    assert code == 2 and "--isl: a request of 100,000 + 100 tokens needs more KV cache" in " ".join(err.split())
    code, out, err = run_cli("simulate", *base, "--isl", "1000", "--osl", "100", "--rate", "1", "--requests", "10",
                             "--json")
    assert code == 0 and json.loads(out)["rejected_too_long"] == 0


#: A small simulate run the error cases add one option to.
LOAD = ("simulate", "meta-llama/Llama-3.1-8B", "--system", "hgx_h200", "--isl", "10", "--osl", "10", "--rate", "1")


@pytest.mark.parametrize("args, match", [
    (("simulate",), "MODEL or --scenario"),
    (("simulate", "meta-llama/Llama-3.1-8B"), "--system"),
    (("simulate", "meta-llama/Llama-3.1-8B", "--system", "hgx_h200", "--osl", "10", "--rate", "1"),
     "no input lengths"),
    (("simulate", "meta-llama/Llama-3.1-8B", "--system", "hgx_h200", "--isl", "10", "--osl", "10"),
     "no arrival rate"),
    ((*LOAD, "--policy", "fastest"), "--policy: unknown policy 'fastest'; choose one of round_robin"),
    ((*LOAD, "--arrival", "weird"), "--arrival: unknown arrival process 'weird'; choose one of poisson, gamma, mmpp"),
    ((*LOAD, "--ttft-percentile", "99"), "--ttft-percentile: judges a latency target; give --ttft-ms"),
    ((*LOAD, "--min-goodput", "0.5"), "--min-goodput: judges a latency target; give --ttft-ms or --tpot-ms"),
    # a failure's replica, node or restart without its time was silently ignored: nothing failed
    ((*LOAD, "--fail-replica", "1"), "--fail-replica: describes a failure: give its time, --fail-at SECONDS"),
    ((*LOAD, "--restart-after", "5"), "--restart-after: describes a failure"),
    ((*LOAD, "--fail-at", "1", "--fail-replica", "0", "--fail-node", "0"), "--fail-node: a failure takes one replica"),
    (("simulate", "meta-llama/Llama-3.1-8B", "--system", "hgx_h200", "--trace", "nope.csv"), "trace file not found"),
    (("simulate", "meta-llama/Llama-3.1-8B", "--system", "hgx_h200", "--trace", "."), "trace file .: a directory"),
    ((*LOAD, "--requests", "10", "--plot", "x.jpg"), "PNG"),
])
def test_errors_exit_2(run_cli, args, match):
    code, out, err = run_cli(*args)
    assert code == 2
    assert match in err


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs procfs: a folder where no file can be created")
@pytest.mark.parametrize("option", ["--requests-csv", "--csv", "--plot"])
def test_an_output_where_nothing_can_be_written_is_refused_before_work(run_cli, option):
    """/proc exists but takes no new file, even for root: a FileNotFoundError traceback after the simulation
    before; now one error line before any work."""
    code, out, err = run_cli(*LOAD, "--requests", "10", option,
                             "/proc/clusterfit.png" if option == "--plot" else "/proc/clusterfit.csv")
    assert code == 2 and err.startswith(f"error: {option}: ") and "cannot write in /proc" in err, err
    assert "Traceback" not in err


def test_missing_matplotlib_is_a_clear_error(run_cli, monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    code, out, err = run_cli("simulate", "meta-llama/Llama-3.1-8B", "--system", "hgx_h200", "--isl", "10", "--osl",
                             "10", "--rate", "1", "--requests", "10", "--plot", str(tmp_path / "x.png"))
    assert code == 2 and "plots need matplotlib" in err and "pip install matplotlib" in err


def test_window_output_tokens_are_counted_when_generated():
    """Each window's output_tokens_per_s counted a request's whole answer in the window it finished: 83,500 tok/s in
    one 2 s window of one H200 replica that emits at most ~16,000 (batch ~1,000 sequences under overload). Now the
    tokens follow the replica's decode steps: every window within 10% of the run's peak rate, the total kept."""
    import clusterfit as cf

    res = cf.simulate(model="llama-3.1-8b", system="h200", isl=200, osl=1000, rate=25, replicas=1, requests=2000)
    win = res.windows
    w = win[1].t_s - win[0].t_s
    rates = [x.output_tokens_per_s for x in win]
    assert sum(rates) * w == pytest.approx(2000 * 1000, rel=1e-9)
    steady = sorted(rates)[len(rates) // 2]   # the median window: the replica at its full batch
    assert max(rates) < 1.1 * steady and max(rates) < 1.15 * res.throughput.output_tokens_per_s
    assert 14_000 < steady < 17_000


def test_window_output_tokens_while_a_restarted_replica_decodes(run_json, tmp_path):
    """After a failure and restart the retried requests decode for ~14 s before the first finishes: those windows
    read 0 tok/s while the replica decoded. Also in the --csv export."""
    out = tmp_path / "w.csv"
    rep = run_json("simulate", "llama-3.1-8b", "--system", "h200", "--isl", "200", "--osl", "2000", "--rate", "2",
                   "--replicas", "1", "--requests", "40", "--fail-at", "15", "--restart-after", "5", "--csv", str(out))
    assert [e["event"] for e in rep["events"]] == ["replica_lost", "replica_restarted"]
    first_done = min(x["t_s"] for x in rep["windows"] if x["t_s"] >= 20 and x["completed"])
    decoding = [x for x in rep["windows"] if 21 <= x["t_s"] < first_done - 1]
    assert len(decoding) >= 10 and all(x["output_tokens_per_s"] > 2000 for x in decoding)
    assert all(x["output_tokens_per_s"] == 0 for x in rep["windows"] if 15 <= x["t_s"] < 20)   # no replica
    rows = list(csv.DictReader(out.open()))
    assert [float(r["output_tokens_per_s"]) for r in rows] == pytest.approx([x["output_tokens_per_s"]
                                                                             for x in rep["windows"]])
