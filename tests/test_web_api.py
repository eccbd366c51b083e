"""The HTTP API (`clusterfit serve`): same answers as the Python API, 4xx with the CLI's messages, no server
paths, bounded bodies and work, and a schemathesis fuzz of /openapi.json (no 5xx, responses match the schema)."""

from __future__ import annotations

import asyncio
import builtins
import json
import os
import pathlib
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

pytest.importorskip("fastapi", reason="the web extra is not installed (pip install -e '.[web]')")
httpx = pytest.importorskip("httpx")
schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, settings  # noqa: E402

import clusterfit as cf  # noqa: E402
from _webserver import running_server  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:The 'alias' attribute with value:UserWarning")

GLM = {"model": "zai-org/GLM-5.3", "precision": "fp8", "systems": ["h100", "h200", "b200"]}


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with running_server() as url:
        yield url


@pytest.fixture(scope="module")
def client(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=30) as c:
        yield c


def test_fit_glm_equals_python_api(client: httpx.Client) -> None:
    """Its speed is measured in benchmarks/api_speed.py (results/api_speed.json), not here."""
    resp = client.post("/api/fit", json=GLM)
    assert resp.status_code == 200, resp.text
    expected = cf.fit(model=GLM["model"], precision="fp8", systems=GLM["systems"]).model_dump(mode="json")
    assert resp.json() == expected
    by_system = {r["system"]: r for r in resp.json()["results"]}
    assert by_system["dgx_h100"]["nodes"] == 2 and by_system["hgx_h200"]["nodes"] == 1


def test_lists_and_health(client: httpx.Client) -> None:
    models = client.get("/api/models").json()["models"]
    assert any(m["hf_id"] == "zai-org/GLM-5.3" for m in models)
    systems = client.get("/api/systems").json()["systems"]
    assert {"dgx_h100", "hgx_h200", "dgx_b200"} <= {s["id"] for s in systems}
    assert client.get("/api/health").json()["status"] == "ok"


def _post(client: httpx.Client, path: str, content: str | bytes) -> httpx.Response:
    return client.post(path, content=content, headers={"Content-Type": "application/json"})


@pytest.mark.parametrize("body, status, message", [
    ('{"model": "zai-org/GLM-5.3", ', 400, "malformed JSON"),
    ("[1, 2]", 400, "must be a JSON object"),
    ('{"model": "no-such-model"}', 422, "unknown model 'no-such-model'"),
    ('{"model": "glm-5.3", "context": -5}', 422, "context: must be an integer in 1..100,000,000, got -5"),
    ('{"model": "glm-5.3", "precision": "fp7"}', 422, "fp7"),
    ('{"model": "glm-5.3", "systems": ["h900"]}', 422, "unknown system 'h900'"),
    ('{"model": "glm-5.3", "systems": []}', 422, "systems: list should have at least 1 item"),
    ('{"model": "glm-5.3", "bogus": 1}', 422, "bogus: is not a parameter of FitBody"),
    ('{"model": "glm-5.3", "catalog": ["/etc/hw.yaml"]}', 422, "catalog: not accepted over HTTP"),
    ('{"model": "x", "config": {"hidden_size": "big", "num_hidden_layers": 2}}', 422, "hidden_size"),
    ('{"model": "x", "config": {"colour": "blue", "flavour": 7}}', 422, "missing required field"),
    ('{"model": "x", "config": {"hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100, '
     '"num_attention_heads": 4, "num_key_value_heads": 3}}', 422, "num_key_value_heads"),
    ('{"model": "x", "config": [1]}', 422, "config"),
])
def test_fit_errors_are_4xx_with_the_cli_message(client: httpx.Client, body: str, status: int, message: str) -> None:
    resp = _post(client, "/api/fit", body)
    assert resp.status_code == status, resp.text
    detail = resp.json()["detail"]
    assert message in detail
    assert "Traceback" not in resp.text


def test_error_text_is_the_cli_text(client: httpx.Client) -> None:
    with pytest.raises(cf.ClusterfitError) as exc:
        cf.fit(model="glm-5.3", systems=["h900"])
    assert client.post("/api/fit", json={"model": "glm-5.3", "systems": ["h900"]}).json()["detail"] == str(exc.value)


def test_five_megabyte_body_is_413(client: httpx.Client) -> None:
    body = json.dumps({"model": "glm-5.3", "config": {"pad": "x" * 5_000_000}})
    resp = _post(client, "/api/fit", body)
    assert resp.status_code == 413
    assert "larger than 1,000,000 bytes" in resp.json()["detail"]


def test_streamed_body_over_the_limit_is_413(client: httpx.Client) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"model": "glm-5.3", "config": {"pad": "'
        for _ in range(40):
            yield b"x" * 50_000
        yield b'"}}'
    resp = client.post("/api/fit", content=chunks(), headers={"Content-Type": "application/json"})
    assert resp.status_code == 413


@pytest.mark.parametrize("model", ["/etc/passwd", "../x/config.json", "config.json", "~/secret", "C:\\x\\config.json"])
def test_server_paths_are_refused_without_touching_them(client: httpx.Client, monkeypatch: pytest.MonkeyPatch,
                                                         model: str) -> None:
    touched: list[str] = []
    needle = model.replace("~", "").replace("\\", "/").strip("./").split("/")[-1]

    def spy(name: str, original):  # noqa: ANN001, ANN202
        def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            if any(needle in str(a) for a in args[:1]):
                touched.append(f"{name}({args[0]!r})")
            return original(*args, **kwargs)
        return wrapper

    for attr in ("read_text", "read_bytes", "open", "exists", "is_file", "is_dir", "stat"):
        monkeypatch.setattr(pathlib.Path, attr, spy(f"Path.{attr}", getattr(pathlib.Path, attr)))
    monkeypatch.setattr(builtins, "open", spy("open", builtins.open))
    monkeypatch.setattr(os, "stat", spy("os.stat", os.stat))
    for path in ("/api/fit", "/api/perf", "/api/plan", "/api/simulate"):
        body = {"model": model, "system": "h200", "isl": 100, "osl": 10, "rate": 1} if path != "/api/fit" \
            else {"model": model}
        if path == "/api/perf":
            body = {"model": model, "system": "h200", "isl": 100, "osl": 10, "batch": 1}
        if path == "/api/plan":
            body.pop("system")
        resp = client.post(path, json=body)
        assert resp.status_code == 422, (path, resp.text)
        assert "not a bundled model" in resp.json()["detail"] or "unknown model" in resp.json()["detail"]
    assert touched == []


@pytest.mark.parametrize("path, body, field, instead", [
    ("/api/plan", {"model": "glm-5.3", "isl": 100, "osl": 10, "rate": 1, "scenario": "/etc/scenario.yaml"}, "scenario",
     "send the scenario's settings as the request's own fields"),
    ("/api/simulate", {"model": "llama-3.1-8b", "system": "h200", "trace": "/var/log/trace.csv"}, "trace",
     "send the load as `rate`"),
    ("/api/perf", {"model": "llama-3.1-8b", "system": "h200", "isl": 10, "osl": 10, "batch": 1, "catalog": ["a.yaml"]},
     "catalog", "GET /api/systems"),
    ("/api/deploy", {"model": "llama-3.1-8b", "isl": 100, "osl": 10, "rate": 1, "plan_file": "plan.json"},
     "plan_file", "the server plans it again"),
    ("/api/deploy", {"model": "llama-3.1-8b", "isl": 100, "osl": 10, "rate": 1, "out": "d"}, "out",
     "the server writes no file"),
])
def test_file_fields_are_refused(client: httpx.Client, path: str, body: dict, field: str, instead: str) -> None:
    """Each names what to send instead."""
    resp = client.post(path, json=body)
    assert resp.status_code == 422
    assert resp.json()["parameter"] == field and "not accepted over HTTP" in resp.json()["detail"]
    assert instead in resp.json()["detail"], resp.json()["detail"]


def test_inline_config_sizes_a_custom_model(client: httpx.Client) -> None:
    path = pathlib.Path(cf.__file__).parent / "catalog/models/meta-llama__Llama-3.1-8B.json"
    config = json.loads(path.read_text())
    resp = client.post("/api/fit", json={"model": "my-llama", "config": config, "systems": ["h200"], "context": 8192})
    assert resp.status_code == 200, resp.text
    got = resp.json()
    want = cf.fit(model="meta-llama/Llama-3.1-8B", systems=["h200"], context=8192).model_dump(mode="json")
    assert got["model"]["name"] == "my-llama"
    assert got["results"][0]["max_sequences"] == want["results"][0]["max_sequences"]
    assert got["model"]["total_params"] == want["model"]["total_params"]
    plan = client.post("/api/plan", json={"model": "my-llama", "config": config, "isl": 1000, "osl": 100, "rate": 2,
                                          "systems": ["h200"]})
    assert plan.status_code == 200, plan.text
    assert plan.json()["recommended"]["system"] == "hgx_h200"


def test_plan_perf_simulate(client: httpx.Client) -> None:
    plan = client.post("/api/plan", json={"model": "glm-5.3", "isl": 4096, "osl": 1024, "rate": 5, "ttft_ms": 2000,
                                          "tpot_ms": 50, "systems": ["h100", "h200", "b200"],
                                          "endpoint_price": "in=0.6,out=2.2"})
    assert plan.status_code == 200, plan.text
    assert plan.json()["recommended"]["system"] in {"dgx_h100", "hgx_h200", "dgx_b200"}
    assert plan.json()["endpoint"]["verdict"]
    perf = client.post("/api/perf", json={"model": "llama-3.1-8b", "system": "h200", "tp": 1, "isl": 1024, "osl": 128,
                                          "batch": 1, "context": 1024})
    assert perf.status_code == 200 and perf.json() == cf.perf(model="llama-3.1-8b", system="h200", tp=1, isl=1024,
                                                               osl=128, batch=1, context=1024).model_dump(mode="json")
    sim = client.post("/api/simulate", json={"model": "llama-3.1-8b", "system": "h200", "replicas": 2, "rate": 10,
                                             "requests": 2000, "isl": 1000, "osl": 200})
    assert sim.status_code == 200, sim.text
    assert sim.json()["completed"] == 2000
    big = client.post("/api/simulate", json={"model": "llama-3.1-8b", "system": "h200", "requests": 200_001})
    assert big.status_code == 422 and "requests: must be an integer in 1..200,000" in big.json()["detail"]
    # a closed loop (sim.clients): its clients in the answer; a rate beside it is refused naming the field
    closed = client.post("/api/simulate", json={"model": "llama-3.1-8b", "system": "h200", "concurrency": 8,
                                                "requests": 200, "isl": 500, "osl": 50})
    assert closed.status_code == 200, closed.text
    assert closed.json()["closed_loop"]["clients"] == 8 and closed.json()["completed"] == 200
    both = client.post("/api/simulate", json={"model": "llama-3.1-8b", "system": "h200", "concurrency": 8, "rate": 2})
    assert both.status_code == 422 and both.json()["parameter"] == "concurrency", both.text


def test_busy_and_timeout() -> None:
    from clusterfit.web.app import Busy, Runner, TooLong

    async def scenario() -> None:
        release = threading.Event()
        runner = Runner(workers=1, timeout_s=5, queue_s=0.1)
        first = asyncio.ensure_future(runner.run(release.wait))
        await asyncio.sleep(0.05)
        with pytest.raises(Busy):
            await runner.run(lambda: 1)
        release.set()
        assert await first is True
        assert await runner.run(lambda: 2) == 2
        slow = Runner(workers=1, timeout_s=0.05)
        with pytest.raises(TooLong, match="more than the 0.05 s of compute"):
            await slow.run(lambda: time.sleep(0.3))

    asyncio.run(scenario())


def test_waiting_calls_hold_no_thread_of_the_default_executor() -> None:
    """A call waiting for a worker blocked a thread of the event loop's default executor (a Semaphore.acquire run
    there) for up to queue_s: with that executor's threads all waiting, a catalog read (asyncio.to_thread) could
    not start. Here the executor has one thread and two calls wait: the read must answer at once, the waiting calls
    get the worker in turn, and a call cancelled while it waits takes no slot."""
    from concurrent.futures import ThreadPoolExecutor

    from clusterfit.web.app import Runner

    async def scenario() -> None:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=1))
        release = threading.Event()
        runner = Runner(workers=1, timeout_s=10, queue_s=5)
        first = asyncio.ensure_future(runner.run(lambda: release.wait(5)))
        await asyncio.sleep(0.05)
        waiting = [asyncio.ensure_future(runner.run(lambda i=i: i)) for i in (1, 2)]
        gone = asyncio.ensure_future(runner.run(lambda: "never"))
        await asyncio.sleep(0.05)
        assert runner.slots.waiting == 3
        gone.cancel()
        assert await asyncio.wait_for(asyncio.to_thread(lambda: "read"), 1) == "read"
        release.set()
        assert await first is True and [await w for w in waiting] == [1, 2]
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert runner.slots.waiting == 0 and await runner.slots.wait(0, 0)   # the one slot is free
        runner.slots.release()

    asyncio.run(scenario())


def test_a_simulation_past_the_budget_frees_its_worker() -> None:
    """A simulation answered 422 for running past the per-call budget stops at its next budget check
    (clusterfit.deadline) instead of holding the only worker to its end: a 200,000-request simulation over 4,096
    replicas runs 39.7 s (`clusterfit simulate llama-3.1-8b --system h200 --isl 1000 --osl 200 --rate 5 --requests
    200000 --replicas 4096`, on an idle 2-core machine; ~90 s under a fuzzing pass's load), and every call in that
    time after the 422 got 429."""
    from clusterfit.web.app import Runner, TooLong

    def heavy() -> object:
        return cf.simulate(model="llama-3.1-8b", system="h200", isl=1000, osl=200, rate=5, requests=200_000,
                           replicas=4096)

    async def scenario() -> None:
        runner = Runner(workers=1, timeout_s=0.5)
        with pytest.raises(TooLong):
            await runner.run(heavy)
        t0 = time.monotonic()
        while not await runner.slots.wait(0, 0):   # the slot comes back once the simulation stops
            assert time.monotonic() - t0 < 10, "the simulation kept its worker after the 422"
            await asyncio.sleep(0.05)
        runner.slots.release()
        assert await runner.run(lambda: 3) == 3

    asyncio.run(scenario())


@contextmanager
def _gated_fit() -> Iterator[threading.Event]:
    """``cf.api.fit`` held until the yielded event is set (at most 5 s), so a call keeps its worker that long."""
    import clusterfit.api  # noqa: F401 - cf.api is loaded on first use

    gate = threading.Event()
    original = cf.api.fit

    def slow_fit(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        gate.wait(5)
        return original(*args, **kwargs)

    cf.api.fit = slow_fit  # type: ignore[assignment]
    try:
        yield gate
    finally:
        cf.api.fit = original  # type: ignore[assignment]


def _fit_in_thread(c: httpx.Client, results: list[int]) -> threading.Thread:
    t = threading.Thread(target=lambda: results.append(c.post("/api/fit", json=GLM).status_code))
    t.start()
    time.sleep(0.3)
    return t


def test_429_over_http() -> None:
    with _gated_fit() as gate, running_server(workers=1, warm=False, queue_s=0.2) as url, \
            httpx.Client(base_url=url, timeout=30) as c:
        results: list[int] = []
        t = _fit_in_thread(c, results)
        busy = c.post("/api/fit", json=GLM)
        gate.set()
        t.join()
    assert busy.status_code == 429 and busy.headers["retry-after"] == "1"
    assert results == [200]


def test_a_call_waits_for_a_worker_and_catalog_reads_take_none() -> None:
    """With the only worker held, a second computation waits for it (queue_s) instead of a 429, and the catalog
    reads answer meanwhile: they take no worker slot."""
    with _gated_fit() as gate, running_server(workers=1, warm=False, queue_s=5) as url, \
            httpx.Client(base_url=url, timeout=30) as c:
        results: list[int] = []
        first = _fit_in_thread(c, results)
        waiting = _fit_in_thread(c, results)
        models, systems = c.get("/api/models"), c.get("/api/systems")
        gate.set()
        first.join()
        waiting.join()
    assert results == [200, 200]
    assert models.status_code == 200 and systems.status_code == 200


def test_a_plan_past_the_budget_frees_its_worker() -> None:
    """A plan's search checks the per-call budget (clusterfit.deadline) per layout, so a plan answered 422 gives
    its worker back instead of holding it to the end of the search."""
    from clusterfit.web.app import Runner, TooLong

    def heavy() -> object:
        return cf.plan(model="deepseek-ai/DeepSeek-V3", isl=4096, osl=1024, rate=5, ttft_ms=2000, tpot_ms=50)

    async def scenario() -> None:
        runner = Runner(workers=1, timeout_s=0.05)
        with pytest.raises(TooLong):
            await runner.run(heavy)
        t0 = time.monotonic()
        while not await runner.slots.wait(0, 0):
            assert time.monotonic() - t0 < 2, "the plan kept its worker after the 422"
            await asyncio.sleep(0.02)
        runner.slots.release()

    asyncio.run(scenario())


def test_repeated_precisions_are_refused(client: httpx.Client) -> None:
    body = {"model": "llama-3.1-8b", "isl": 1000, "osl": 100, "rate": 1, "systems": ["h200"],
            "precisions": ["fp8", "bf16", "FP8"]}
    r = client.post("/api/plan", json=body)
    assert r.status_code == 422 and "'FP8' is given twice" in r.json()["detail"]
    r = client.post("/api/plan", json={**body, "precisions": [f"p{i}" for i in range(33)]})
    assert r.status_code == 422 and r.json()["parameter"] == "precisions"


def test_numbers_as_strings_and_engine_spellings(client: httpx.Client) -> None:
    """A number sent as a string is refused naming the field (pydantic's lax mode read "100" as 100); an engine
    spelled "VLLM" or "TensorRT-LLM" is answered under its name ("vllm", "trtllm"), as the command line does."""
    perf = {"model": "llama-3.1-8b", "system": "h200", "isl": 100, "osl": 10, "batch": 1}
    r = client.post("/api/perf", json={**perf, "isl": "100"})
    assert r.status_code == 422 and r.json() == {"detail": "isl: must be a JSON number, not a string, got '100'",
                                                 "parameter": "isl"}
    assert client.post("/api/perf", json={**perf, "engine": "VLLM"}).json()["engine"] == "vllm"
    plan = {"model": "llama-3.1-8b", "isl": 100, "osl": 10, "rate": 1, "systems": ["h200"]}
    assert client.post("/api/plan", json={**plan, "engine": "TensorRT-LLM"}).json()["engine"] == "trtllm"


def test_errors_name_their_field_over_http(client: httpx.Client) -> None:
    plan = {"model": "llama-3.1-8b", "isl": 100, "osl": 10, "rate": 1, "systems": ["h200"]}
    r = client.post("/api/plan", json={**plan, "prices": ["h200=1e400"]})
    assert r.status_code == 422 and r.json()["parameter"] == "prices" and "h200=1e400" in r.json()["detail"]
    for path, body in (("/api/fit", {"systems": ["h200"]}), ("/api/perf", {"system": "h200", "isl": 10, "osl": 1,
                                                                           "batch": 1}),
                       ("/api/plan", {"isl": 10, "osl": 1, "rate": 1})):
        r = client.post(path, json=body)   # over HTTP there is no --scenario to give the model instead
        assert r.status_code == 422 and r.json() == {"parameter": "model", "detail": (
            "model: is required: a bundled model's name or alias (GET /api/models), or the model's config.json "
            "content as `config`")}, path
    cfg = json.loads((pathlib.Path(cf.__file__).parent / "catalog" / "models" / "Qwen__Qwen3-8B.json").read_text())
    r = client.post("/api/perf", json={"config": cfg, "system": "h200", "isl": 10, "osl": 1, "batch": 1})
    assert r.status_code == 200 and r.json()["model"] == "qwen3"   # named after its model_type (no _name_or_path)
    deep = '{"model": "llama-3.1-8b", "config": ' + '{"a": ' * 5000 + "1" + "}" * 5000 + "}"
    r = client.post("/api/fit", content=deep, headers={"content-type": "application/json"})
    # JSON's reader stops at Python's recursion limit (400); under a higher limit the body parses and the config's
    # own depth check refuses it (422): either way the answer says it is nested too deeply
    assert r.status_code in (400, 422) and "nested" in r.json()["detail"], r.text


def test_an_unreadable_body_says_which_fault_it_has(client: httpx.Client) -> None:
    """A body FastAPI cannot read was recognised by FastAPI's message text and answered with both faults it might
    be ('nested too deeply ... or bytes that are not UTF-8'); the reader's exception, which FastAPI raises the 400
    from, now says which one, and where for bytes."""
    body = b'{"model": "llama-3.1-8b", "config": {"name": "\xff"}}'
    r = client.post("/api/fit", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json() == {"parameter": None, "detail": (
        f"the request body could not be parsed: bytes that are not UTF-8 text (byte {body.index(0xff)})")}, r.text
    deep = '{"model": "llama-3.1-8b", "config": ' + '{"a": ' * 5000 + "1" + "}" * 5000 + "}"
    r = client.post("/api/fit", content=deep, headers={"content-type": "application/json"})
    if r.status_code == 400:   # under a higher recursion limit the body parses and the config's depth check answers
        assert "nested too deeply" in r.json()["detail"] and "UTF-8" not in r.json()["detail"], r.text


def test_a_long_wrong_value_is_not_echoed_whole(client: httpx.Client) -> None:
    """A 3,000-element list where a number belongs: the message names the field and shows the value's start only
    (it echoed all ~9,000 characters)."""
    r = client.post("/api/perf", json={"model": "llama-3.1-8b", "system": "h200", "isl": [1] * 3000, "osl": 1,
                                       "batch": 1})
    assert r.status_code == 422 and r.json()["parameter"] == "isl"
    assert r.json()["detail"].startswith("isl: must be an integer, got [1, 1,") and len(r.json()["detail"]) < 120


def test_docs_and_page_are_served_without_a_cdn(client: httpx.Client) -> None:
    docs = client.get("/docs")
    assert docs.status_code == 200
    assert "/docs-static/swagger-ui-bundle.js" in docs.text and "cdn" not in docs.text.lower()
    assert client.get("/docs-static/swagger-ui-bundle.js").status_code == 200
    assert client.get("/openapi.json").json()["paths"]["/api/fit"]["post"]
    page = client.get("/")
    assert page.status_code == 200 and "default-src 'self'" in page.headers["content-security-policy"]
    for asset in ("/static/app.js", "/static/app.css"):
        text = client.get(asset).text
        assert "https://" not in text and "//cdn" not in text
    assert "https://" not in page.text


# ------------------------------------------------------------------------------------------- fuzzing
@pytest.fixture(scope="module")
def api_schema(base_url: str):  # noqa: ANN201
    return schemathesis.openapi.from_url(f"{base_url}/openapi.json")


fuzz = schemathesis.pytest.from_fixture("api_schema")


@fuzz.parametrize()
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_fuzz_openapi(case) -> None:  # noqa: ANN001
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (content_type_conformance, response_schema_conformance,
                                                   status_code_conformance)

    case.call_and_validate(checks=[not_a_server_error, status_code_conformance, content_type_conformance,
                                   response_schema_conformance], timeout=30)


def test_plan_with_an_empty_system_list_is_refused(client: httpx.Client) -> None:
    """An empty list is not 'every system' (leave it out for that): it names the parameter."""
    resp = client.post("/api/plan", json={"model": "llama-3.1-8b", "isl": 100, "osl": 10, "rate": 1, "systems": []})
    assert resp.status_code == 422 and resp.json()["parameter"] == "systems"


@pytest.mark.parametrize("path, body, field", [
    ("/api/plan", {"model": "llama-3.1-8b", "isl": 100, "osl": 10, "rate": True}, "rate"),
    ("/api/perf", {"model": "llama-3.1-8b", "system": "h200", "isl": 10, "osl": 10, "batch": 1, "context": 1024,
                   "tp": False}, "tp"),
    ("/api/fit", {"model": "llama-3.1-8b", "context": True}, "context"),
])
def test_true_and_false_are_not_numbers(client: httpx.Client, path: str, body: dict, field: str) -> None:
    """Pydantic's lax mode reads true as 1: a plan for 'rate: true' answered for 1 request/s."""
    resp = client.post(path, json=body)
    assert resp.status_code == 422 and resp.json()["parameter"] == field, resp.text
    assert "true / false only go to yes/no fields, got " in resp.json()["detail"]


def test_deploy_of_an_inline_config_names_the_model(client: httpx.Client) -> None:
    """An inline config.json sizes a model, but does not say which checkpoint the engine should serve."""
    cfg = {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "vocab_size": 1000, "intermediate_size": 512, "max_position_embeddings": 4096}
    resp = client.post("/api/deploy", json={"model": "tiny", "config": cfg, "isl": 100, "osl": 10, "rate": 1,
                                            "systems": ["h200"]})
    assert resp.status_code == 422 and resp.json()["parameter"] == "model", resp.text
    assert "give its Hugging Face id" in resp.json()["detail"]


@pytest.mark.parametrize("path, body, field, message", [
    ("/api/perf", {"model": "llama-3.1-8b", "system": "h900", "isl": 10, "osl": 10, "concurrency": 1}, "system",
     "unknown system 'h900'"),
    ("/api/perf", {"model": "llama-3.1-8b", "system": "h200", "isl": 10, "osl": 10, "concurrency": 1,
                   "kv_dtype": "fp4"}, "kv_dtype", "unknown KV-cache dtype 'fp4'"),
    ("/api/perf", {"model": "llama-3.1-8b", "system": "h200", "isl": 10, "osl": 10, "concurrency": 1,
                   "engine": "vllmx"}, "engine", "unknown engine 'vllmx'"),
    ("/api/plan", {"model": "llama-3.1-8b", "isl": 100, "osl": 10, "rate": 1, "systems": ["h900"]}, "systems",
     "unknown system 'h900'"),
    ("/api/plan", {"model": "llama-3.1-8b", "isl": 100, "osl": 10, "rate": 1, "systems": ["h200"],
                   "precisions": ["fp7"]}, "precisions", "unknown precision 'fp7'"),
    ("/api/fit", {"model": "llama-3.1-8b", "systems": ["h200"], "kv_dtype": "int3"}, "kv_dtype",
     "unknown KV-cache dtype 'int3'"),
    ("/api/perf", {"model": "deepseek-v3", "system": "h200", "isl": 10, "osl": 10, "concurrency": 1,
                   "experts_precision": "fp7"}, "experts_precision", "unknown precision 'fp7'"),
])
def test_unknown_names_name_their_field(client: httpx.Client, path: str, body: dict, field: str,
                                        message: str) -> None:
    """An unknown system, precision, KV dtype or engine names the body field it came in (plural where the body
    takes a list), as every other refused value does."""
    resp = client.post(path, json=body)
    assert resp.status_code == 422 and resp.json()["parameter"] == field, resp.text
    assert message in resp.json()["detail"]


def test_draft_head_config_over_http(client: httpx.Client) -> None:
    """The draft head's config.json travels as content (the server reads no file): its weights are counted as on
    the command line, and a head the model cannot use names the field."""
    import json
    from pathlib import Path

    cfg = json.loads((Path(__file__).parent / "data" / "eagle" / "llama3-70B-eagle3.json").read_text())
    body = {"model": "meta-llama/Llama-3.1-70B", "system": "h200", "tp": 8, "isl": 1000, "osl": 100,
            "concurrency": 8, "num_speculative_tokens": 3, "speculative_method": "eagle3"}
    plain = client.post("/api/perf", json=body)
    counted = client.post("/api/perf", json={**body, "speculative_draft_config": cfg})
    assert plain.status_code == counted.status_code == 200, counted.text
    assert counted.json()["weight_bytes_per_gpu"] - plain.json()["weight_bytes_per_gpu"] == 703_135_744
    bad = client.post("/api/perf", json={**body, "speculative_draft_config": {**cfg, "hidden_size": 4096}})
    assert bad.status_code == 422 and bad.json()["parameter"] == "speculative_draft_config", bad.text


def test_a_body_not_sent_as_json_says_so(client) -> None:
    """A JSON object sent with another content type is not parsed by FastAPI; the answer said 'got a JSON bytes'."""
    r = client.post("/api/fit", content=b'{"model": "llama-3.1-8b", "system": "h200"}',
                    headers={"content-type": "text/plain"})
    assert r.status_code == 400 and "content-type application/json (got content-type text/plain)" in r.json()["detail"]
    r = client.post("/api/fit", content=b"[1, 2]", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["detail"].endswith("got a JSON array")


@pytest.mark.parametrize("content, got", [(b'"x"', "a JSON string"), (b"null", "null"), (b"", "no body")])
def test_a_json_body_that_is_not_an_object_says_so(client, content: bytes, got: str) -> None:
    """A JSON string sent as JSON was answered 'must be JSON sent with content-type application/json (got
    content-type application/json)' (it was taken for a body FastAPI had not parsed), and null as 'no body'."""
    r = client.post("/api/fit", content=content, headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json() == {
        "detail": f"the request body must be a JSON object of parameters, got {got}", "parameter": None}, r.text


def test_a_checkpoint_variant_is_a_model_over_http(client) -> None:
    """The names users deploy (-Instruct, -FP8) were 'unknown model' over HTTP while the CLI read them; the deploy
    answer serves the variant's own checkpoint, and a variant's FP8 suffix sets its precision."""
    r = client.post("/api/deploy", json={"model": "meta-llama/Llama-3.1-8B-Instruct", "systems": ["h200"], "isl": 1000,
                                         "osl": 200, "rate": 5})
    assert r.status_code == 200, r.text
    launch = next(f["text"] for f in r.json()["files"] if f["path"].endswith(".sh"))
    assert "vllm serve meta-llama/Llama-3.1-8B-Instruct " in launch
    fp8 = client.post("/api/fit", json={"model": "Qwen/Qwen3-8B-FP8", "systems": ["h200"]}).json()
    base = client.post("/api/fit", json={"model": "Qwen/Qwen3-8B", "systems": ["h200"]}).json()
    assert fp8["model"]["name"] == "Qwen3-8B-FP8"
    assert fp8["results"][0]["weight_bytes"] < 0.6 * base["results"][0]["weight_bytes"]
    bad = client.post("/api/fit", json={"model": "Qwen3-8B-FooBar", "systems": ["h200"]})
    assert bad.status_code == 422 and "unknown model" in bad.json()["detail"]


PLAN = {"model": "llama-3.1-8b", "isl": 100, "osl": 10, "rate": 1, "systems": ["h200"]}
SIM = {"model": "llama-3.1-8b", "system": "h200", "isl": 100, "osl": 10, "rate": 1, "requests": 100}


@pytest.mark.parametrize("path, body, parameter, detail", [
    # two loads: 'give only one of rate, concurrency, tokens_per_s' named no field
    ("/api/plan", {**PLAN, "concurrency": 4}, "concurrency", "concurrency: give only one of rate, concurrency, "
     "tokens_per_s (rate is given too)"),
    ("/api/deploy", {**PLAN, "tokens_per_s": 40}, "tokens_per_s", "tokens_per_s: give only one of rate, concurrency, "
     "tokens_per_s (rate is given too)"),
    # the endpoint price's errors named the command line's --endpoint-price, and no field
    ("/api/plan", {**PLAN, "endpoint_price": "x"}, "endpoint_price", "endpoint_price: expects in=$/Mtok,out=$/Mtok "
     "(e.g. in=0.6,out=2.2), got 'x'"),
    ("/api/plan", {**PLAN, "endpoint_price": "in=0,out=0"}, "endpoint_price", "endpoint_price: endpoint prices are "
     "both 0: give the endpoint's $ per million input and output tokens (in=0.6,out=2.2)"),
    # a simulation without lengths or rate: '... or --isl' (the command line's flag) and no field
    ("/api/simulate", {**SIM, "isl": None}, "isl", "isl: no input lengths: give isl (tokens per prompt), a scenario "
     "workload, or simulation.input"),
    ("/api/simulate", {**SIM, "osl": None}, "osl", "osl: no output lengths: give osl (tokens per answer), a "
     "scenario workload, or simulation.output"),
    ("/api/simulate", {**SIM, "rate": None}, "rate", "rate: no arrival rate: give rate (requests/s), a scenario "
     "load, or simulation.arrival.rate_rps"),
])
def test_request_errors_name_their_field(client: httpx.Client, path: str, body: dict, parameter: str,
                                         detail: str) -> None:
    r = client.post(path, json=body)
    assert r.status_code == 422 and r.json() == {"parameter": parameter, "detail": detail}, r.text


@pytest.mark.parametrize("path, content, parameter, key", [
    ("/api/fit", '{"model": "llama-3.1-8b", "model": "qwen3-8b"}', "model", "model"),   # answered for Qwen3-8B
    ("/api/plan", '{"model": "llama-3.1-8b", "isl": 100, "osl": 10, "rate": 1, "rate": 50}', "rate", "rate"),
    ("/api/fit", '{"model": "x", "config": {"hidden_size": 64, "hidden_size": 128}}', "config", "hidden_size"),
])
def test_a_key_given_twice_is_refused(client: httpx.Client, path: str, content: str, parameter: str,
                                      key: str) -> None:
    """json keeps the last of two values of one key: the body named one model and the server sized the other.
    Files refuse a repeated key (inputs.unique_keys); so does a body, naming the key or the field holding it."""
    r = _post(client, path, content)
    assert r.status_code == 422 and r.json() == {"parameter": parameter, "detail": f"{parameter}: the key '{key}' is "
                                                 "repeated in one object; give each key once"}, r.text


def test_a_plan_too_large_to_simulate_is_answered_unverified(client: httpx.Client) -> None:
    """verify on a plan of more than 4,096 replicas was a 422 with parameter null (the simulator's bound on
    replicas); the plan is answered, its verification not run, with the reason."""
    r = client.post("/api/plan", json={**PLAN, "isl": 30000, "rate": 30000, "no_disagg": True, "verify": True})
    assert r.status_code == 200, r.text
    assert r.json()["recommended"]["serving_replicas"] > 4096
    assert r.json()["verify"]["simulated"] is False and "more than the 4,096 one simulation runs" in \
        r.json()["verify"]["reason"]
