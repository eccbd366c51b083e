"""config.json of models that are not bundled, from the Hugging Face Hub (clusterfit.hub): a stand-in Hub on a
loopback port of this process (HF_ENDPOINT points at it); the real network is never used."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from clusterfit import hub
from clusterfit.arch import forget_model, load_model
from clusterfit.errors import ClusterfitError

#: A small real-shaped config (Llama layout) served by the stand-in Hub.
TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512, "intermediate_size": 1024,
        "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 32000,
        "torch_dtype": "bfloat16", "max_position_embeddings": 4096}


class StandInHub:
    """Serves ``routes`` (URL path -> (status, body bytes)) on 127.0.0.1 and records each request's path and
    Authorization header."""

    def __init__(self) -> None:
        self.routes: dict[str, tuple[int, bytes]] = {}
        self.requests: list[tuple[str, str | None]] = []
        hub_ = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                hub_.requests.append((self.path, self.headers.get("Authorization")))
                status, body = hub_.routes.get(self.path, (404, b'{"error": "Entry not found"}'))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def serve(self, repo_id: str, config: object, status: int = 200) -> None:
        body = config if isinstance(config, bytes) else json.dumps(config).encode()
        self.routes[f"/{repo_id}/resolve/main/config.json"] = (status, body)


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[StandInHub]:
    s = StandInHub()
    s.thread.start()
    monkeypatch.setenv("HF_ENDPOINT", s.url)
    monkeypatch.setenv("CLUSTERFIT_CACHE", str(tmp_path / "cache"))
    for var in ("HF_TOKEN", "CLUSTERFIT_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    try:
        yield s
    finally:
        s.server.shutdown()
        s.server.server_close()
        s.thread.join(timeout=5)


def _load(repo_id: str):
    forget_model(repo_id)  # the in-memory model cache would answer a second load without the hub
    return load_model(repo_id)


def test_fetch_parse_and_cache(stand_in: StandInHub, tmp_path: Path) -> None:
    stand_in.serve("someorg/tiny-llama", TINY)
    m = _load("someorg/tiny-llama")
    assert (m.hf_id, m.num_layers, m.hidden) == ("someorg/tiny-llama", 4, 512)
    assert stand_in.requests == [("/someorg/tiny-llama/resolve/main/config.json", None)]
    cached = tmp_path / "cache" / "hub" / "someorg" / "tiny-llama" / "main" / "config.json"
    assert json.loads(cached.read_text()) == TINY
    # the second load reads the cache: no request, also with the network off
    stand_in.routes.clear()
    assert _load("someorg/tiny-llama").num_layers == 4
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        assert _load("someorg/tiny-llama").num_layers == 4
    assert len(stand_in.requests) == 1


def test_hf_token_is_sent_as_bearer(stand_in: StandInHub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")
    stand_in.serve("gated-org/model-a", TINY)
    _load("gated-org/model-a")
    assert stand_in.requests[-1][1] == "Bearer hf_test_token"


@pytest.mark.parametrize("status", [401, 403])
def test_gated_repository_names_hf_token(stand_in: StandInHub, run_cli, status: int) -> None:
    stand_in.serve(f"gated-org/model-{status}", {"error": "Access restricted"}, status)
    code, _, err = run_cli("model", f"gated-org/model-{status}")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), err
    assert f"HTTP {status}" in err and "HF_TOKEN" in err


def test_unknown_repository(stand_in: StandInHub, run_cli) -> None:
    code, _, err = run_cli("fit", "someorg/no-such-model", "--system", "h200")
    assert code == 2 and "no config.json for 'someorg/no-such-model'" in err and "HTTP 404" in err


@pytest.mark.parametrize("var", ["CLUSTERFIT_OFFLINE", "HF_HUB_OFFLINE"])
def test_offline_says_how_to_pass_a_local_config(stand_in: StandInHub, monkeypatch: pytest.MonkeyPatch, run_cli,
                                                 var: str) -> None:
    monkeypatch.setenv(var, "1")
    stand_in.serve("someorg/offline-model", TINY)
    code, _, err = run_cli("fit", "someorg/offline-model", "--system", "h200")
    assert code == 2 and err.startswith("error:") and var in err and "path/to/config.json" in err
    assert stand_in.requests == []


def test_network_failure_says_how_to_pass_a_local_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                         run_cli) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens on this port now: connection refused
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("CLUSTERFIT_CACHE", str(tmp_path))
    for var in ("CLUSTERFIT_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    code, _, err = run_cli("model", "someorg/unreachable")
    assert code == 2 and "cannot fetch someorg/unreachable's config.json" in err and "path/to/config.json" in err


def test_bad_answers_are_refused_and_not_cached(stand_in: StandInHub, tmp_path: Path, run_cli) -> None:
    stand_in.serve("someorg/not-json", b"<html>rate limited</html>")
    stand_in.serve("someorg/too-big", b" " * (hub.MAX_DOCUMENT_BYTES + 10) + b"{}")
    stand_in.serve("someorg/jamba", dict(TINY, model_type="jamba", layers_block_type=["mamba"] * 4))
    for repo, msg in (("someorg/not-json", "not valid JSON"), ("someorg/too-big", "larger than"),
                      ("someorg/jamba", "unsupported architecture: state-space")):
        code, _, err = run_cli("model", repo)
        assert code == 2 and msg in err and len(err.strip().splitlines()) == 1, err
        assert not hub.cached_path(repo).exists()


def test_ids_and_endpoints_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    for bad in ("../etc/passwd", "a/b/c", "org/..", "org/--x", "/abs"):
        with pytest.raises(ClusterfitError):
            hub.fetch_config(bad)
    for url in ("file:///etc", "http://[::1", "http://localhost:abc", "http://"):
        monkeypatch.setenv("HF_ENDPOINT", url)
        with pytest.raises(ClusterfitError, match="HF_ENDPOINT must be an http"):
            hub.endpoint()


def test_cache_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CLUSTERFIT_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hub.cache_dir() == tmp_path / "xdg" / "clusterfit" / "hub"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert hub.cache_dir() == tmp_path / "home" / ".cache" / "clusterfit" / "hub"
    monkeypatch.setenv("CLUSTERFIT_CACHE", str(tmp_path / "mine"))
    assert hub.cache_dir() == tmp_path / "mine" / "hub"


def test_the_http_api_never_fetches(stand_in: StandInHub) -> None:
    pytest.importorskip("fastapi", reason="the web extra is not installed")
    httpx = pytest.importorskip("httpx")
    from _webserver import running_server

    stand_in.serve("someorg/tiny-llama-web", TINY)
    with running_server(warm=False) as url, httpx.Client(base_url=url, timeout=30) as client:
        resp = client.post("/api/fit", json={"model": "someorg/tiny-llama-web"})
    assert resp.status_code == 422 and "unknown model" in resp.json()["detail"]
    assert stand_in.requests == []
