"""Options that contradict themselves or each other (an empty --host, a system priced or named twice, a load too small
to plan for) are refused with one ``error:`` line naming the option, exit code 2; the HTTP API answers 422 naming the
parameter. Error messages of unknown names start with the option they came from."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from clusterfit.errors import ParameterError

PLAN = ("plan", "llama-3.1-8b", "--system", "h200", "--isl", "1000", "--osl", "200", "--rate", "2", "--tpot-ms", "50")
PLAN_BODY = {"model": "llama-3.1-8b", "systems": ["h200"], "isl": 1000, "osl": 200, "rate": 2, "tpot_ms": 50}


@pytest.fixture(scope="module")
def client() -> Iterator[object]:
    """An HTTP client of `clusterfit serve`'s app, on a loopback port (the web extra; skipped without it)."""
    pytest.importorskip("fastapi", reason="the web extra is not installed (pip install -e '.[web]')")
    httpx = pytest.importorskip("httpx")
    from _webserver import running_server

    with running_server() as url, httpx.Client(base_url=url, timeout=60) as c:
        yield c


class _LoopbackOnly(socket.socket):
    """A socket that refuses to listen on anything but loopback: a test of --host must not expose a port."""

    def bind(self, address):  # type: ignore[no-untyped-def]
        if isinstance(address, tuple) and address[0] not in ("127.0.0.1", "::1", "localhost"):
            raise AssertionError(f"would listen on {address!r}")
        super().bind(address)


@pytest.mark.parametrize("host", ["", "  "])
@pytest.mark.parametrize("command", [["serve"], ["twin", "llama-3.1-8b", "--system", "h200"]])
def test_an_empty_host_is_refused_not_read_as_every_interface(run_cli, monkeypatch, command, host):
    """``bind(('', port))`` listens on every interface (0.0.0.0); the docs say only 0.0.0.0 exposes the server."""
    monkeypatch.setattr(socket, "socket", _LoopbackOnly)
    code, out, err = run_cli(*command, "--host", host, "--port", "0")
    assert code == 2
    assert err.startswith("error: --host: ") and "empty" in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("prices, system", [
    (["h200=3", "h200=4"], "h200"),            # the same name twice: the last one won
    (["h200=3", "H200-SXM=4"], "h200_sxm"),    # two spellings of the GPU: the last one won
    (["hgx_h200=4", "h200=3"], "hgx_h200"),    # the system and its GPU: the system's price won, in either order
    (["h200=3", "hgx_h200=4"], "hgx_h200"),
])
def test_a_system_priced_twice_is_refused(run_cli, client, prices, system):
    """hgx_h200's GPU is h200_sxm ('h200' is its alias); which of two prices a plan used depended on the spelling."""
    args = [a for p in prices for a in ("--price", p)]
    code, out, err = run_cli(*PLAN, *args, "--json")
    assert code == 2 and out == ""
    assert err.startswith(f"error: --price: {system} is priced twice (") and "Traceback" not in err, err
    assert all(p in err for p in prices), err
    r = client.post("/api/plan", json={**PLAN_BODY, "prices": prices})
    assert r.status_code == 422 and r.json()["parameter"] == "prices", r.text
    assert r.json()["detail"].startswith(f"prices: {system} is priced twice")


def test_one_price_per_system_still_applies(run_cli):
    """Two prices for two systems are no conflict: the plan bills h200 at the price given ($3/GPU-hour)."""
    code, out, err = run_cli(*PLAN, "--price", "h200=3", "--price", "dgx_h100=2", "--json")
    assert code == 0, err
    best = json.loads(out)["recommended"]
    assert best["system"] == "hgx_h200" and best["price_per_gpu_hour"] == 3.0


@pytest.mark.parametrize("command", [("fit", "llama-3.1-8b"), PLAN[:2] + PLAN[4:]])
@pytest.mark.parametrize("names", [("h200", "hgx_h200"), ("hgx_h200", "H200-SXM")])
def test_one_system_named_twice_is_refused(run_cli, client, command, names):
    """'h200' (a GPU name: its standard node) and 'H200-SXM' (the GPU's id, any case) are hgx_h200, as 'hgx_h200'
    is: fit showed its column twice and /api/fit returned it twice, as `--system h200 --system h200` is refused."""
    args = [a for n in names for a in ("--system", n)]
    code, out, err = run_cli(*command, *args)
    assert code == 2 and out == ""
    assert err.strip() == f"error: --system: hgx_h200 is given twice (as {names[0]!r} and {names[1]!r})", err
    path, body = (("/api/fit", {"model": "llama-3.1-8b"}) if command[0] == "fit" else ("/api/plan", PLAN_BODY))
    r = client.post(path, json={**body, "systems": list(names)})
    assert r.status_code == 422 and r.json()["parameter"] == "systems", r.text
    assert "hgx_h200 is given twice" in r.json()["detail"]


def test_deploy_refuses_one_system_named_twice_for_a_plan_file(run_cli, tmp_path):
    """deploy --plan FILE --system picks the plan's row of a system: two names of one system are refused too."""
    code, out, err = run_cli(*PLAN, "--json")
    assert code == 0, err
    plan = tmp_path / "plan.json"
    plan.write_text(out)
    code, out, err = run_cli("deploy", "--plan", str(plan), "--system", "h200", "--system", "hgx_h200",
                             "--out", str(tmp_path / "out"))
    assert code == 2
    assert err.strip() == "error: --system: hgx_h200 is given twice (as 'h200' and 'hgx_h200')", err


@pytest.mark.parametrize("args, start", [
    (("perf", "llama-3.1-8b", "--system", "h200", "--isl", "100", "--osl", "10", "--batch", "1", "--precision", "int3"),
     "error: --precision: unknown precision 'int3'."),
    (("perf", "llama-3.1-8b", "--system", "nosys", "--isl", "100", "--osl", "10", "--batch", "1"),
     "error: --system: unknown system 'nosys'."),
    (("perf", "llama-3.1-8b", "--system", "h200", "--isl", "100", "--osl", "10", "--batch", "1", "--kv-dtype", "x"),
     "error: --kv-dtype: unknown KV-cache dtype 'x'."),
    (("perf", "llama-3.1-8b", "--system", "h200", "--isl", "100", "--osl", "10", "--batch", "1", "--engine", "vllmx"),
     "error: --engine: unknown engine 'vllmx'."),
    ((*PLAN, "--precision", "int3"), "error: --precision: unknown precision 'int3'."),
    (("fit", "llama-3.1-8b", "--system", "h200", "--system", "nosys"), "error: --system: unknown system 'nosys'."),
    (("fit", "llama-3.1-8b", "-s", "nosys"), "error: --system: unknown system 'nosys'."),   # fit's short flag
    (("fit", "nomodel"), "error: unknown model 'nomodel'."),   # the MODEL argument: no option to name
])
def test_an_unknown_name_says_which_option_gave_it(run_cli, args, start):
    code, out, err = run_cli(*args)
    assert code == 2 and out == ""
    assert err.startswith(start) and len(err.strip().splitlines()) == 1, err


def test_a_name_from_a_scenario_is_not_blamed_on_an_option(run_cli, tmp_path):
    """An unknown system in a scenario file is no --system option's: the message is not put on a flag not given; it
    names the scenario file and its field (as one system named twice there does)."""
    f = tmp_path / "s.yaml"
    f.write_text("model: llama-3.1-8b\nsystems: [nosys]\nworkload:\n  isl: 1000\n  osl: 200\n"
                 "  load: {requests_per_s: 2}\n")
    code, out, err = run_cli("plan", "--scenario", str(f))
    assert code == 2 and err.startswith(f"error: --scenario: scenario file {f}: systems: unknown system 'nosys'."), err
    assert "--system" not in err, err


def test_deploy_names_the_plan_file_an_unknown_model_came_from(run_cli, tmp_path):
    """deploy --plan FILE without MODEL serves the plan's model: when it is unknown, the error says it came from
    --plan (it said "unknown model ..." as if MODEL had been given)."""
    code, out, err = run_cli(*PLAN, "--json")
    assert code == 0, err
    plan = json.loads(out)
    plan["model"] = "nomodel"
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    code, out, err = run_cli("deploy", "--plan", str(path), "--out", str(tmp_path / "out"))
    assert code == 2
    assert err.startswith(f"error: --plan: {path}: model: unknown model 'nomodel'"), err
    assert err.rstrip().endswith("give the model as MODEL (a Hugging Face id or a config.json)"), err


@pytest.mark.parametrize("load, says", [
    (("--concurrency", "0.5"), "error: --concurrency: must be a whole number of concurrent sessions, at least 1, "
                               "got 0.5"),
    (("--concurrency", "2.5"), "error: --concurrency: must be a whole number of concurrent sessions, at least 1, "
                               "got 2.5"),
    (("--rate", "1e-300"), "error: --rate: must be at least 1e-06 requests/s (one request every ~12 days) to plan "
                           "for, got 1e-300"),
    (("--rate", "5e-7"), "error: --rate: must be at least 1e-06 requests/s (one request every ~12 days) to plan "
                         "for, got 5e-07"),
])
def test_a_load_too_small_to_plan_for_is_refused(run_cli, client, load, says):
    """A plan for half a concurrent client, or for 1e-300 requests/s (reported as such), was accepted. 1e-6
    requests/s is schema.MIN_LOAD, the floor of simulate's --rate and plan's --tokens-per-s (1 / 1e-6 s = 11.6
    days between requests)."""
    base = [a for a in PLAN if a not in ("--rate", "2")]
    code, out, err = run_cli(*base, *load)
    assert code == 2 and out == "" and err.strip() == says, err
    body = {k: v for k, v in PLAN_BODY.items() if k != "rate"}
    r = client.post("/api/plan", json={**body, load[0].lstrip("-"): float(load[1])})
    assert r.status_code == 422 and r.json()["parameter"] == load[0].lstrip("-"), r.text


@pytest.mark.parametrize("load, says", [
    ("{concurrent_sessions: 0.5}", "load (concurrent_sessions) must be a whole number of concurrent sessions, at "
                                   "least 1, got 0.5"),
    ("{concurrent_sessions: 2.5}", "load (concurrent_sessions) must be a whole number of concurrent sessions, at "
                                   "least 1, got 2.5"),
    ("{requests_per_s: 1.0e-300}", "load (requests_per_s) must be at least 1e-06 requests/s (one request every ~12 "
                                   "days) to plan for, got 1e-300"),
    ("{output_tokens_per_s: 1.0e-7}", "load (output_tokens_per_s) must be at least 1e-06 output tokens/s to plan "
                                      "for, got 1e-07"),
])
def test_a_scenario_load_too_small_to_plan_for_is_refused(run_cli, tmp_path, load, says):
    """A scenario's load goes through the same floor as --rate / --concurrency (planning.workload.load_problem): half
    a concurrent session and 1e-300 requests/s were planned (the floor was checked on the options only)."""
    f = tmp_path / "s.yaml"
    f.write_text(f"model: llama-3.1-8b\nsystems: [h200]\nworkload:\n  isl: 1000\n  osl: 200\n  load: {load}\n"
                 "slo: {tpot_ms: 50}\n")
    code, out, err = run_cli("plan", "--scenario", str(f))
    assert code == 2 and out == "" and err.strip() == f"error: scenario file {f}: {says}", err


def test_a_token_rate_too_small_gets_the_plans_words_as_a_rate_does(run_cli, client):
    """--tokens-per-s under schema.MIN_LOAD was refused by its field's bound ('must be a number in
    1e-06..1,000,000,000.0') while --rate and a scenario's output_tokens_per_s got the plan's words
    (planning.workload.load_problem); all three now read alike, over HTTP too."""
    base = [a for a in PLAN if a not in ("--rate", "2")]
    says = "must be at least 1e-06 output tokens/s to plan for, got 1e-07"
    code, out, err = run_cli(*base, "--tokens-per-s", "1e-7")
    assert code == 2 and out == "" and err.strip() == f"error: --tokens-per-s: {says}", err
    body = {k: v for k, v in PLAN_BODY.items() if k != "rate"}
    r = client.post("/api/plan", json={**body, "tokens_per_s": 1e-7})
    assert r.status_code == 422 and r.json() == {"detail": f"tokens_per_s: {says}", "parameter": "tokens_per_s"}


def test_a_rate_too_small_is_refused_as_a_plan_with_verify_too(run_cli):
    """With --verify a rate under the floor was left to the simulator's check (a special case kept for its message);
    the plan's own check now refuses it first, in the plan's words."""
    base = [a for a in PLAN if a not in ("--rate", "2")]
    code, out, err = run_cli(*base, "--rate", "5e-7", "--verify")
    assert code == 2 and out == "" and err.strip() == ("error: --rate: must be at least 1e-06 requests/s (one "
                                                       "request every ~12 days) to plan for, got 5e-07"), err


def test_a_whole_concurrency_and_the_least_rate_are_planned(run_cli):
    """The bounds are inclusive: concurrency 1 and 1e-6 requests/s are planned (one replica carries either)."""
    base = [a for a in PLAN if a not in ("--rate", "2")]
    for load in (("--concurrency", "1"), ("--rate", "1e-6")):
        code, out, err = run_cli(*base, *load, "--json")
        assert code == 0, err
        assert json.loads(out)["recommended"]["replicas"] == 1


@pytest.mark.parametrize("systems", ["[h200, hgx_h200]", "[h200, h200]"])
def test_a_scenario_naming_one_system_twice_is_refused_naming_the_file(run_cli, tmp_path, systems):
    """A scenario's systems go through the same rule as --system (the second spelling was silently dropped); the
    error names the scenario file, not --system, which was not given."""
    f = tmp_path / "s.yaml"
    f.write_text(f"model: llama-3.1-8b\nsystems: {systems}\nworkload:\n  isl: 1000\n  osl: 200\n"
                 "  load: {requests_per_s: 2}\n")
    second = systems.strip("[]").split(", ")[1]
    code, out, err = run_cli("plan", "--scenario", str(f))
    assert code == 2 and err.strip() == (f"error: --scenario: scenario file {f}: systems: hgx_h200 is given twice "
                                         f"(as 'h200' and {second!r})"), err


@pytest.mark.parametrize("args, start", [
    (("plan", "--scenario", "{tmp}/missing.yaml"), "error: --scenario: scenario file not found: "),
    (("plan", "--scenario", "{tmp}/s.txt"), "error: --scenario: scenario file {tmp}/s.txt: use .yaml, .yml or .toml"),
    (("simulate", "llama-3.1-8b", "--system", "h200", "--replicas", "1", "--trace", "{tmp}/missing.csv"),
     "error: --trace: trace file not found: "),
    (("bench", "http://127.0.0.1:9", "--trace", "{tmp}/missing.csv", "--requests", "3"),
     "error: --trace: trace file not found: "),
])
def test_a_file_that_cannot_be_read_names_its_option(run_cli, tmp_path, args, start):
    """A scenario or trace file that is missing or of the wrong kind is the option's problem: the message starts
    with the option that named it (it said "scenario file not found: ..." / "trace file not found: ...")."""
    (tmp_path / "s.txt").write_text("model: llama-3.1-8b\n")
    code, out, err = run_cli(*(a.format(tmp=tmp_path) for a in args))
    assert code == 2 and out == ""
    assert err.startswith(start.format(tmp=tmp_path)) and len(err.strip().splitlines()) == 1, err


def test_deploy_names_an_engine_it_writes_no_files_for_once(run_cli, tmp_path):
    """The message named --engine itself, so the formatter special-cased details starting with their flag (and the
    HTTP API's said 'engine: --engine ...'); the flag is now added by the formatter only, once."""
    from clusterfit import api

    code, out, err = run_cli("deploy", "llama-3.1-8b", "--engine", "foo", "--isl", "100", "--osl", "100", "--rate",
                             "1", "--out", str(tmp_path / "d"))
    assert code == 2 and err.strip() == "error: --engine: 'foo': deployment files exist for vllm, sglang, trtllm", err
    with pytest.raises(ParameterError) as exc:
        api.deploy(model="llama-3.1-8b", engine="foo", isl=100, osl=100, rate=1)
    assert exc.value.parameter == "engine" and str(exc.value) == ("engine: 'foo': deployment files exist for vllm, "
                                                                  "sglang, trtllm")


def test_parameter_flag_always_prefixes_the_flag():
    """commands.output.parameter_flag no longer leaves a detail that starts with its own flag unprefixed."""
    from clusterfit.commands.output import parameter_flag

    assert parameter_flag(ParameterError("engine", "--engine x: y")) == "--engine: --engine x: y"
    assert parameter_flag(ParameterError("kv_dtype", "bad")) == "--kv-dtype: bad"
