"""clusterfit bench against a loopback OpenAI-compatible server the tests start and stop themselves
(tests/_faulty_openai_server.py): measured TTFT / TPOT / ITL follow the times the server was told to send tokens
at; malformed SSE, a dropped connection, a 500, an error event and a timeout count as failures with their reasons;
nothing listening, a garbage server and bad options end in one `error:` line and exit 2. Every run is bounded in
requests and time and targets only 127.0.0.1."""

from __future__ import annotations

import asyncio
import csv
import json
import socket
from typing import Any

import httpx
import numpy as np
import pytest

from _faulty_openai_server import MODEL, Script, running
from clusterfit.bench import BenchConfig, run_bench
from clusterfit.bench.client import RequestFailed, StreamTiming, read_stream

# ---------------------------------------------------------------------------------------------- SSE parsing


def _read(chunks: list[bytes], endpoint: str = "completions", content_type: str = "text/event-stream",
          times: list[float] | None = None) -> StreamTiming:
    """read_stream over a response whose body arrives in ``chunks``; the clock reads ``times`` one per event."""

    async def body():
        for c in chunks:
            yield c

    clock = iter(times or [float(i) for i in range(100)]).__next__
    response = httpx.Response(200, headers={"content-type": content_type}, content=body())
    return asyncio.run(read_stream(response, endpoint, clock=clock))


def _event(obj: Any) -> str:
    return "data: " + json.dumps(obj) + "\n\n"


def _tok(text: str, finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}


def test_well_formed_stream_split_anywhere():
    text = (": ping\n\n" + _event(_tok(" a")) + _event(_tok(" b")) + _event(_tok("")) + _event(_tok(" c", "length"))
            + _event({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11}})
            + "data: [DONE]\n\n").replace("\n", "\r\n")
    raw = text.encode()
    chunks = [raw[i:i + 7] for i in range(0, len(raw), 7)]           # events cut mid-line, CRLF line ends
    t = _read(chunks, times=[10.0, 10.5, 10.7, 11.0, 11.1, 11.2])
    assert (t.first, t.last) == (10.0, 11.0)
    assert t.gaps == pytest.approx([0.5, 0.2, 0.3])
    assert (t.chunks, t.text_chunks) == (4, 3)                      # the empty-text chunk is timed, not counted
    assert (t.prompt_tokens, t.completion_tokens, t.finish_reason) == (7, 4, "length")


def test_chat_stream_role_chunk_counts_as_first():
    events = [_event({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
              _event({"choices": [{"index": 0, "delta": {"content": " hi"}}]}),
              _event({"choices": [{"index": 0, "delta": {"content": " there"}, "finish_reason": "length"}]}),
              "data: [DONE]\n\n"]
    t = _read([e.encode() for e in events], "chat", times=[1.0, 1.25, 1.5, 1.6])
    assert (t.first, t.last, t.chunks, t.text_chunks) == (1.0, 1.5, 3, 2)
    assert t.completion_tokens is None                              # no usage: output counted from chunks (2)


@pytest.mark.parametrize("body, reason, words", [
    ("data: hello\n\n", "malformed", "not JSON"),
    ("data: [1, 2]\n\n", "malformed", "not a JSON object"),
    (_event({"foo": 1}), "malformed", "neither choices nor usage"),
    (_event({"choices": {"text": "a"}}), "malformed", "choices is not a list"),
    (_event({"choices": ["a"]}), "malformed", "not an object"),
    (_event({"choices": [], "usage": {"completion_tokens": "4"}}), "malformed", "not a token count"),
    (_event(_tok(" a")) + _event({"error": {"message": "out of KV cache"}}), "stream_error", "out of KV cache"),
    (_event(_tok(" a")) + _event(_tok(" b")), "dropped", "before data: [DONE]"),
    ("data: [DONE]\n\n", "malformed", "no chunk with a choice"),
])
def test_malformed_streams_name_their_reason(body, reason, words):
    with pytest.raises(RequestFailed) as exc:
        _read([body.encode()])
    assert exc.value.reason == reason and words in exc.value.detail


def test_chat_chunk_without_delta_and_a_non_sse_answer_are_malformed():
    with pytest.raises(RequestFailed, match="without a delta"):
        _read([_event({"choices": [{"index": 0, "text": "a"}]}).encode()], "chat")
    with pytest.raises(RequestFailed, match="text/event-stream") as exc:
        _read([b"<html>hello</html>"], content_type="text/html")
    assert exc.value.reason == "malformed"


# ------------------------------------------------------------------------------------------ loopback server
TTFT_S, ITL_S = 0.08, 0.04
#: Allowed difference between a measured and a scheduled time: connection set-up, the event loops of the two
#: threads and a shared 2-core machine.
TOL_S = 0.04
#: Runs tried before the timings count as off the server's schedule: a wall-clock check on a shared machine can
#: catch a stall of the whole VM (CI once measured a 185 ms mean TTFT for the 80 ms scheduled, while the same
#: test alone measured 86-91 ms in eleven runs); a bench that measured the wrong event would miss in every run.
ATTEMPTS = 3


def _timing_misses(res, closed_loop: bool) -> list[str]:
    """How ``res`` departs from the server's schedule: token k at TTFT + k x ITL after the request, so TTFT 80 ms,
    TPOT = ITL = 40 ms, E2E = 80 + 5 x 40 = 280 ms; a closed loop of 2 x 4 such requests runs two rounds."""
    checks = [("ttft", res.ttft_s.mean, TTFT_S, TOL_S), ("tpot", res.tpot_s.mean, ITL_S, TOL_S / 3),
              ("itl", res.itl_s.mean, ITL_S, TOL_S / 3), ("e2e", res.e2e_s.mean, TTFT_S + 5 * ITL_S, TOL_S)]
    if closed_loop:
        checks.append(("duration", res.duration_s, 2 * (TTFT_S + 5 * ITL_S), 3 * TOL_S))
    return [f"{name} {got:.3f} s, scheduled {want:.3f} +- {tol:.3f}" for name, got, want, tol in checks
            if abs(got - want) > tol]


def test_measured_timing_follows_the_server(tmp_path):
    for _ in range(ATTEMPTS):
        with running(lambda body: Script(ttft_s=TTFT_S, itl_s=ITL_S)) as server:
            r = run_bench(url=server.url, rate=20, requests=6, isl=32, osl=6, timeout=10)
            chat = run_bench(BenchConfig(url=server.url + "/v1/", endpoint="chat", concurrency=2, requests=4,
                                         isl=32, osl=6, model=MODEL, timeout=10))
            bodies = [s.body for s in server.seen if s.method == "POST"]
        misses = _timing_misses(r, False) + _timing_misses(chat, True)
        if not misses:
            break
    assert not misses, f"off the server's schedule in all {ATTEMPTS} runs (the last: {misses})"
    assert r.model == MODEL                                         # found at GET /v1/models
    assert (r.requests, r.completed, r.failed) == (6, 6, 0)
    for res in (r, chat):
        assert res.output_tokens == 6 * res.completed
    # the server counts 4 characters per token: the filler prompt of 32 tokens is 128 characters
    assert r.input_tokens == 6 * 32
    assert chat.peak_concurrency == 2 and chat.load.kind == "concurrency"
    # what was sent: the preflight (1 token), then the run's requests
    first, run_body = bodies[0], bodies[1]
    assert first["max_tokens"] == 1
    assert run_body["stream"] is True and run_body["stream_options"] == {"include_usage": True}
    assert run_body["ignore_eos"] is True and run_body["max_tokens"] == 6 and len(run_body["prompt"]) == 4 * 32
    assert len({b["prompt"] for b in bodies[1:7]}) == 6               # distinct prompts (no shared prefix)
    chat_body = bodies[-1]
    assert chat_body["messages"][0]["role"] == "user" and len(chat_body["messages"][0]["content"]) == 4 * 32


def test_the_arrivals_are_the_simulators(tmp_path):
    """--rate R --requests N --seed S sends at the arrival times `clusterfit simulate` simulates for those options
    (clusterfit.sim.build_requests with the same arrival process, lengths and seed)."""
    from clusterfit.sim import SimulationConfig, build_requests

    with running(lambda body: Script()) as server:
        r = run_bench(url=server.url, model=MODEL, rate=40, requests=8, isl=16, osl=2, seed=7)
        d = run_bench(url=server.url, model=MODEL, rate=40, duration=0.2, isl=16, osl=2, seed=7)
    sim = build_requests(SimulationConfig(requests=8, seed=7, arrival={"rate_rps": 40},
                                          input={"dist": "fixed", "value": 16}, output={"dist": "fixed", "value": 2}))
    assert [x.scheduled_s for x in r.records] == pytest.approx(sim.arrival_s.tolist())
    # sent on time: the median request within 50 ms, every one within 0.5 s (the stub server shares this process, and a
    # busy 2-core host held up two of the eight by 60 ms once, failing 'all but one within 50 ms')
    late = sorted(x.sent_s - x.scheduled_s for x in r.records)
    assert late[len(late) // 2] < 0.05 and late[-1] < 0.5
    # --duration 0.2 alone: the arrivals of the same process before 0.2 s
    assert d.records and all(x.scheduled_s < 0.2 for x in d.records)
    assert d.load.duration_limit_s == 0.2


def _by_max_tokens(body: dict[str, Any]) -> Script:
    """The answer chosen by the request's max_tokens (set per request by the test's trace)."""
    return {2: Script(), 3: Script(status=500, body=b'{"error": {"message": "engine crashed"}}'),
            4: Script(events="data: this is not json\n\n"), 5: Script(drop_after=2, itl_s=0.01),
            6: Script(error_event="out of KV cache"), 7: Script(done=False), 8: Script(ttft_s=5.0),
            9: Script()}.get(body["max_tokens"], Script())


def test_failures_are_counted_with_their_reasons(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n"
                     + "".join(f"{0.01 * i:.2f},8,{n}\n" for i, n in enumerate(range(2, 10))))
    out = tmp_path / "requests.csv"
    with running(_by_max_tokens) as server:
        from clusterfit.bench import write_requests_csv

        r = run_bench(url=server.url, model=MODEL, trace=str(trace), timeout=0.5)
        write_requests_csv([("", r.records)], out)
    assert (r.requests, r.completed, r.failed) == (8, 2, 6)
    got = {f.reason: f for f in r.failures}
    assert set(got) == {"http_500", "malformed", "dropped", "stream_error", "timeout"}
    assert got["dropped"].count == 2                                # cut mid-stream, and ended before [DONE]
    assert got["http_500"].http_status == 500 and "engine crashed" in got["http_500"].example
    assert "out of KV cache" in got["stream_error"].example
    assert "not JSON" in got["malformed"].example
    # failures are left out of the latencies: the two completed answers had no delay
    assert r.ttft_s.mean is not None and r.ttft_s.mean < 0.1
    rows = list(csv.DictReader(open(out)))
    assert [row["status"] for row in rows] == ["ok", "failed", "failed", "failed", "failed", "failed", "failed",
                                               "ok"]
    assert rows[1]["reason"] == "http_500" and rows[1]["http_status"] == "500"
    assert rows[6]["reason"] == "timeout" and float(rows[6]["e2e_s"]) == pytest.approx(0.5, abs=0.1)


def test_requests_csv_replays_as_a_simulator_trace(tmp_path, run_cli):
    from clusterfit.sim import load_trace

    out = tmp_path / "r.csv"
    with running(lambda body: Script(itl_s=0.002)) as server:
        code, stdout, err = run_cli("bench", server.url, "--rate", "50", "--requests", "5", "--isl", "24", "--osl",
                                    "3", "--csv", str(out), "--json")
    assert code == 0, err
    res = json.loads(stdout)
    assert res["completed"] == 5 and res["load"]["rate_rps"] == 50
    trace = load_trace(out)
    rows = list(csv.DictReader(open(out)))
    assert len(trace) == 5 and trace.input_tokens.tolist() == [24] * 5 and trace.output_tokens.tolist() == [3] * 5
    sent = np.array([float(row["arrival_s"]) for row in rows])
    assert trace.arrival_s == pytest.approx(sent - sent[0])
    assert all(int(row["completion_tokens"]) == 3 and int(row["prompt_tokens"]) == 24 for row in rows)


def test_compare_is_the_simulation_of_the_requests_sent(tmp_path, run_cli):
    from clusterfit import api

    out = tmp_path / "r.csv"
    with running(lambda body: Script(ttft_s=0.01, itl_s=0.005)) as server:
        code, stdout, err = run_cli("bench", server.url, "--rate", "50", "--requests", "6", "--isl", "64", "--osl",
                                    "4", "--compare", "meta-llama/Llama-3.1-8B", "--system", "h200", "--csv",
                                    str(out), "--json")
        assert code == 0, err
        closed_csv = tmp_path / "closed.csv"
        closed = json.loads(run_cli("bench", server.url, "--concurrency", "3", "--requests", "6", "--isl", "64",
                                    "--osl", "4", "--compare", "meta-llama/Llama-3.1-8B", "--system", "h200",
                                    "--replicas", "2", "--csv", str(closed_csv), "--json")[1])
    c = json.loads(stdout)["comparison"]
    assert c["source"] == "simulate" and c["system"] == "hgx_h200"
    # the CSV's send times and lengths are the requests the server saw: simulating it gives the same prediction
    sim = api.simulate(model="meta-llama/Llama-3.1-8B", system="h200", trace=str(out), requests=6, seed=0)
    rows = {row["metric"]: row for row in c["rows"]}
    assert rows["TPOT mean"]["predicted"] == pytest.approx(sim.tpot_s.mean)
    assert rows["TTFT p90"]["predicted"] == pytest.approx(sim.ttft_s.p90)
    assert rows["output throughput"]["predicted"] == pytest.approx(sim.throughput.output_tokens_per_s)
    m = rows["TPOT mean"]
    assert m["ratio"] == pytest.approx(m["measured"] / m["predicted"])
    # a closed loop is the simulator's too: the same requests from 3 clients starting at once over 2 replicas (it
    # was perf's steady state at 2 per replica, means only)
    sim = api.simulate(model="meta-llama/Llama-3.1-8B", system="h200", trace=str(closed_csv), requests=6, seed=0,
                       concurrency=3, ramp_s=0, replicas=2)
    prow = {row["metric"]: row for row in closed["comparison"]["rows"]}
    assert closed["comparison"]["source"] == "simulate" and closed["comparison"]["replicas"] == 2
    assert sim.closed_loop is not None and sim.closed_loop.clients == 3
    assert prow["TPOT mean"]["predicted"] == pytest.approx(sim.tpot_s.mean)
    assert prow["TTFT p90"]["predicted"] == pytest.approx(sim.ttft_s.p90)
    assert prow["output throughput"]["predicted"] == pytest.approx(sim.throughput.output_tokens_per_s)
    assert any("from a closed loop of 3 clients starting at once" in n for n in closed["comparison"]["notes"])


def test_a_run_lists_the_models_once(run_cli):
    """bench without --model and with --compare sent GET /v1/models twice (to find the model, then to see what is
    served); one listing now serves both, and --model without --compare asks for none."""
    with running(lambda body: Script()) as server:
        args = ("bench", server.url, "--rate", "50", "--requests", "2", "--isl", "8", "--osl", "2", "--json")
        code, out, err = run_cli(*args, "--compare", "meta-llama/Llama-3.1-8B", "--system", "h200")
        assert code == 0, err
        listed = sum(1 for s in server.seen if (s.method, s.path) == ("GET", "/v1/models"))
        code, _, err = run_cli(*args, "--model", MODEL)
        assert code == 0, err
        listed_with_model = sum(1 for s in server.seen if (s.method, s.path) == ("GET", "/v1/models")) - listed
    assert json.loads(out)["model"] == MODEL and (listed, listed_with_model) == (1, 0)


def test_sweep_runs_each_load(run_cli):
    with running(lambda body: Script(itl_s=0.002)) as server:
        code, stdout, err = run_cli("bench", server.url, "--concurrency", "1,3", "--requests", "3", "--isl", "8",
                                    "--osl", "2", "--json")
    assert code == 0, err
    s = json.loads(stdout)
    assert s["parameter"] == "concurrency" and s["values"] == [1.0, 3.0]
    assert [run["load"]["concurrency"] for run in s["runs"]] == [1, 3]
    assert [run["peak_concurrency"] for run in s["runs"]] == [1, 3]


# ------------------------------------------------------------------------------------------- usage errors
def _free_port() -> int:
    """A loopback port nothing listens on (bound, read, released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _one_error(code: int, err: str) -> str:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert "Traceback" not in err and lines[0].startswith("error:"), err
    return " ".join(err.split())


def test_nothing_listening_is_an_error(run_cli):
    url = f"http://127.0.0.1:{_free_port()}"
    err = _one_error(*run_cli("bench", url, "--rate", "1", "--requests", "3", "--isl", "8", "--osl", "2")[::2])
    assert "cannot connect" in err and "Connection refused" in err
    err = _one_error(*run_cli("bench", url, "--model", "m", "--rate", "1", "--requests", "3", "--isl", "8", "--osl",
                              "2", "--json")[::2])
    assert "cannot connect" in err


def test_a_garbage_server_is_an_error(run_cli):
    html = Script(status=200, body=b"<html>It works!</html>", content_type="text/html")
    with running(lambda body: html) as server:
        err = _one_error(*run_cli("bench", server.url, "--model", "m", "--rate", "5", "--requests", "3", "--isl",
                                  "8", "--osl", "2")[::2])
        assert "OpenAI-compatible" in err and "text/event-stream" in err
        err = _one_error(*run_cli("bench", server.url + "/nowhere", "--model", "m", "--rate", "5", "--requests",
                                  "3", "--isl", "8", "--osl", "2")[::2])
        assert "404" in err
    with running(lambda body: Script(status=500, body=b"oops")) as server:
        err = _one_error(*run_cli("bench", server.url, "--model", "m", "--rate", "5", "--requests", "3", "--isl",
                                  "8", "--osl", "2")[::2])
        assert "HTTP 500" in err
    with running(lambda body: Script(raw=b"SSH-2.0-OpenSSH_9.2\r\n")) as server:     # not HTTP at all
        err = _one_error(*run_cli("bench", server.url, "--model", "m", "--rate", "5", "--requests", "3", "--isl",
                                  "8", "--osl", "2")[::2])
        assert "OpenAI-compatible" in err and "dropped" in err


@pytest.mark.parametrize("args, words", [
    (["ftp://127.0.0.1:1", "--rate", "1", "--isl", "8", "--osl", "2"], "URL must start with http://"),
    (["http://[::1", "--rate", "1", "--isl", "8", "--osl", "2"], "URL cannot be parsed (Invalid IPv6 URL)"),
    (["http://127.0.0.1:1/v1/completions", "--rate", "1", "--isl", "8", "--osl", "2"], "not the endpoint path"),
    (["http://127.0.0.1:1", "--isl", "8", "--osl", "2"], "--rate: give a load"),
    (["http://127.0.0.1:1", "--rate", "1,x", "--isl", "8", "--osl", "2"], "--rate: must be a number"),
    (["http://127.0.0.1:1", "--rate", "1,2", "--concurrency", "1,2", "--isl", "8", "--osl", "2"], "sweep one"),
    (["http://127.0.0.1:1", "--rate", "1", "--osl", "2"], "--isl: is required"),
    (["http://127.0.0.1:1", "--rate", "-1", "--isl", "8", "--osl", "2"], "--rate: must be a number > 0"),
    (["http://127.0.0.1:1", "--rate", "1", "--isl", "8", "--osl", "2", "--system", "h200"], "--system: shapes"),
    (["http://127.0.0.1:1", "--rate", "1", "--isl", "8", "--osl", "2", "--compare", "llama-3.1-8b"],
     "--compare needs --system"),
    (["http://127.0.0.1:1", "--trace", "azure_code_sample.csv", "--isl", "8"], "a trace gives the arrivals"),
    (["http://127.0.0.1:1", "--concurrency", "2", "--isl-values", "8,x", "--osl", "2"], "--isl-values"),
    (["http://127.0.0.1:1", "--concurrency", "2", "--isl", "8", "--osl", "2", "--burstiness", "0.5"],
     "--burstiness: needs --rate"),
    (["http://127.0.0.1:1", "--rate", "1", "--isl", "8", "--osl", "2", "--endpoint", "embeddings"], "endpoint"),
    # the same words as simulate's and twin's (sim.config.check_policy)
    (["http://127.0.0.1:1", "--rate", "1", "--isl", "8", "--osl", "2", "--compare", "llama-3.1-8b", "--system",
      "h200", "--policy", "fastest"], "--policy: unknown policy 'fastest'; choose one of round_robin"),
])
def test_usage_errors(run_cli, args, words):
    code, out, err = run_cli("bench", *args)
    assert words in _one_error(code, err)


@pytest.mark.parametrize("url, part", [("http://127.0.0.1:18931?x=1", "?x=1"), ("http://127.0.0.1:1/#top", "#top")])
def test_a_url_with_a_query_says_what_the_url_must_be(run_cli, url, part):
    """Found by a fuzzing pass: 'error: URL give the server's base URL ...' (the message was written to follow
    'url:' and read garbled after the CLI's 'URL'). One sentence: what the URL argument must be, what to drop."""
    err = _one_error(*run_cli("bench", url, "--rate", "1", "--isl", "8", "--osl", "2")[::2])
    assert err.startswith("error: URL must be the server's base URL") and repr(part) in err, err
    from clusterfit.bench import parse_config
    from clusterfit.errors import ParameterError

    with pytest.raises(ParameterError) as e:     # the API names the field the same way
        parse_config(url=url, rate=1, isl=8, osl=2)
    assert e.value.parameter == "url" and str(e.value).startswith("url: must be the server's base URL")


def test_too_slow_a_rate_is_worded_for_a_load_test_with_the_simulators_bound(run_cli):
    """Found by a fuzzing pass: bench --rate 1e-9 spoke of 'the simulator's clock' for a live load test. The bound
    is one (sim.requests.check_rate, schema.MIN_LOAD); its message fits who asks. Every value of a sweep is checked
    before the first run (nothing listens at this URL: a checked value would end in 'cannot connect')."""
    from clusterfit.errors import ParameterError
    from clusterfit.schema import MIN_LOAD
    from clusterfit.sim.requests import check_rate

    slow = f"{MIN_LOAD / 1000:g}"
    url = f"http://127.0.0.1:{_free_port()}"
    for rate in (slow, f"1,{slow}"):
        err = _one_error(*run_cli("bench", url, "--rate", rate, "--requests", "2", "--isl", "8", "--osl", "2")[::2])
        assert err.startswith("error: --rate: must be at least") and "load test" in err, err
        assert "simulat" not in err and "cannot connect" not in err, err
    for live in (False, True):
        check_rate(MIN_LOAD, live=live)
        with pytest.raises(ParameterError) as e:
            check_rate(MIN_LOAD / 2, live=live)
        assert e.value.parameter == "rate" and ("simulat" in str(e.value)) is not live


# --------------------------------------------------------------------------------- load shapes (no network)
def test_load_shapes_use_the_simulators_vocabulary():
    from clusterfit.bench import parse_config
    from clusterfit.bench.load import plan

    url = "http://127.0.0.1:1"
    # vLLM's burstiness is the gamma shape k of the gaps: CV = 1/sqrt(k) = 2 for k = 0.25; mean rate 10/s
    bursty = plan(parse_config(url=url, rate=10, burstiness=0.25, requests=4000, isl=8, osl=2, seed=3))
    t = np.array([p.arrival_s for p in bursty.requests])
    gaps = np.diff(t)
    assert bursty.total == 4000 and t[0] == 0.0
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.1)
    assert gaps.mean() == pytest.approx(0.1, rel=0.1)
    # empirical lengths with weights 3:1, a lognormal of mean 500 and CV 0.5 (closed loop: no arrivals)
    closed = plan(parse_config(url=url, concurrency=4, requests=4000, isl=500, osl=64, length_cv=0.5))
    rows = list(closed.requests)
    ins = np.array([p.input_tokens for p in rows])
    assert closed.total == 4000 and all(p.arrival_s is None for p in rows)
    assert ins.mean() == pytest.approx(500, rel=0.05) and ins.std() / ins.mean() == pytest.approx(0.5, rel=0.1)
    emp = plan(parse_config(url=url, rate=5, requests=4000, osl=2,
                            input_lengths={"dist": "empirical", "values": [128, 512], "weights": [3, 1]}))
    ins = np.array([p.input_tokens for p in emp.requests])
    assert set(ins.tolist()) == {128, 512} and (ins == 128).mean() == pytest.approx(0.75, abs=0.03)
    # a closed loop bounded by --duration alone draws as it goes; a shipped trace replays its first rows
    assert plan(parse_config(url=url, concurrency=2, duration=5, isl=8, osl=2)).total is None
    sample = plan(parse_config(url=url, trace="azure_conv_sample.csv", requests=20))
    assert sample.total == 20 and next(sample.requests).arrival_s == 0.0


def test_filler_prompts_are_four_characters_per_token_and_distinct():
    from clusterfit.bench.load import filler_prompt

    a, b = filler_prompt(300, 0), filler_prompt(300, 1)
    assert len(a) == 4 * 300 and a.count(" ") == 300 and a != b
    assert filler_prompt(300, 0) == a                                 # the same for a seed and index
    assert a[:40] != b[:40]                                           # no shared prefix to cache


# ------------------------------------------------------------------------------------- what a run says it did
def test_compare_notes_an_endpoint_serving_another_model(run_cli):
    """--compare llama-3.1-70b against a twin serving Qwen3-0.6B says so (it compared without a word); comparing the
    model the endpoint serves (by its alias) adds no such note."""
    from clusterfit.twin import running_twin

    with running_twin(model="qwen3-0.6b", system="h200") as t:
        args = ("bench", t.url, "--rate", "20", "--requests", "3", "--isl", "16", "--osl", "2", "-s", "h200",
                "--json")
        code, other, err = run_cli(*args, "--compare", "llama-3.1-70b")
        assert code == 0, err
        code, same, err = run_cli(*args, "--compare", "qwen3-0.6b")
        assert code == 0, err
    note = json.loads(other)["comparison"]["notes"][0]
    assert "the endpoint serves" in note and "Qwen3-0.6B" in note and "llama-3.1-70b" in note, note
    assert not any("the endpoint serves" in n for n in json.loads(same)["comparison"]["notes"])


def test_a_trace_shorter_than_requests_is_noted(tmp_path, run_cli):
    trace = tmp_path / "two.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0,16,2\n0.05,16,2\n")
    with running(lambda body: Script(itl_s=0.002)) as server:
        code, out, err = run_cli("bench", server.url, "--trace", str(trace), "--requests", "5", "--json")
        assert code == 0, err
        code, text, err = run_cli("bench", server.url, "--trace", str(trace), "--requests", "5")
        assert code == 0, err
    r = json.loads(out)
    assert r["requests"] == 2 and any("holds 2 requests" in n and "5 --requests" in n for n in r["notes"]), r["notes"]
    assert "holds 2 requests" in " ".join(text.split())


def test_a_closed_loop_of_fewer_requests_than_concurrency_is_predicted_at_the_requests(run_cli, tmp_path):
    """--requests 1 --concurrency 3 never had more than 1 request in flight: the replay is a closed loop of 1 client
    (at most the requests sent), and says so."""
    from clusterfit import api

    one = tmp_path / "one.csv"
    with running(lambda body: Script(ttft_s=0.01, itl_s=0.005)) as server:
        code, out, err = run_cli("bench", server.url, "--concurrency", "3", "--requests", "1", "--isl", "64",
                                 "--osl", "4", "--compare", "meta-llama/Llama-3.1-8B", "--system", "h200", "--csv",
                                 str(one), "--json")
        assert code == 0, err
        code, two, err = run_cli("bench", server.url, "--concurrency", "8", "--requests", "3", "--isl", "64",
                                 "--osl", "4", "--compare", "meta-llama/Llama-3.1-8B", "--system", "h200",
                                 "--replicas", "2", "--json")
        assert code == 0, err
    c = json.loads(out)["comparison"]
    rows = {row["metric"]: row for row in c["rows"]}
    alone = api.simulate(model="meta-llama/Llama-3.1-8B", system="h200", trace=str(one), requests=1, seed=0,
                         concurrency=1, ramp_s=0)
    assert rows["TPOT mean"]["predicted"] == pytest.approx(alone.tpot_s.mean)
    assert any("from a closed loop of 1 client starting at once" in n for n in c["notes"]), c["notes"]
    assert any("fewer than --concurrency 3: at most 1 in flight" in n for n in c["notes"]), c["notes"]
    # 3 requests over 2 replicas: at most 3 in flight (not 8)
    notes = json.loads(two)["comparison"]["notes"]
    assert any("from a closed loop of 3 clients" in n for n in notes) and any("at most 3 in flight" in n for n in notes)


@pytest.mark.parametrize("compared, served, noted", [
    ("deepseek-ai/DeepSeek-V3", "DeepSeek-V3.2", True),      # a newer version: another architecture
    ("zai-org/GLM-4.5", "GLM-4.5-Air", True),                 # -Air is another model
    ("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct", False),
    ("qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", False),
])
def test_a_served_name_matches_the_compared_model_through_the_catalog(compared, served, noted):
    """A served name matches the compared model when it resolves to the same bundled architecture; the substring
    test it replaced took DeepSeek-V3.2 for DeepSeek-V3 and GLM-4.5-Air for GLM-4.5 and said nothing."""
    from types import SimpleNamespace

    from clusterfit.bench.compare import _other_model

    assert bool(_other_model(SimpleNamespace(compare=compared), (served, None))) is noted


def test_an_empty_model_name_is_refused_before_the_server_is_contacted(run_cli):
    """--model '' is given (not None), so no GET /v1/models was asked: the error said '--model not given'. It says
    the name is empty, before any request (nothing listens on port 1)."""
    err = _one_error(*run_cli("bench", "http://127.0.0.1:1", "--model", "", "--rate", "1", "--requests", "1",
                              "--isl", "8", "--osl", "2")[::2])
    assert err.startswith("error: --model is empty"), err
