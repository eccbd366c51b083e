"""A small OpenAI-compatible streaming server for the bench tests: raw HTTP/1.1 on asyncio, on a free 127.0.0.1
port, in a thread of the test process. Each request's answer follows a ``Script`` chosen by the test (token
times, HTTP status, malformed events, a connection dropped mid-stream), so the client's measurements can be checked
against the times the server was told to send at.

Only GET /v1/models and POST /v1/completions and /v1/chat/completions are served; prompt tokens are counted at 4
characters per token (what the bench's filler text is sized by).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

MODEL = "test-model"


@dataclass
class Script:
    """The answer to one request.

    status / body / content_type: a plain answer (an error status, or a non-SSE body) when ``body`` is set or the
    status is not 200. ttft_s / itl_s: delay from the request to the first token event, and between token events.
    tokens: token events to send (None: the request's max_tokens). usage: send the usage event. done: send
    ``data: [DONE]``. drop_after: close the connection after this many token events (no end of the chunked body).
    events: raw SSE text sent instead of tokens. error_event: send an error object after the first token.
    raw: bytes written instead of an HTTP answer, then the connection is closed (a server that is not HTTP).
    """

    status: int = 200
    body: bytes | None = None
    content_type: str = "text/event-stream"
    ttft_s: float = 0.0
    itl_s: float = 0.0
    tokens: int | None = None
    usage: bool = True
    done: bool = True
    drop_after: int | None = None
    events: str | None = None
    error_event: str | None = None
    raw: bytes | None = None


@dataclass
class Seen:
    """What the server received: method, path, JSON body (None for none)."""

    method: str
    path: str
    body: Any


@dataclass
class FaultyServer:
    """Start with ``running(script_for)``; ``url`` is its base; ``seen`` lists the requests received."""

    script_for: Callable[[dict[str, Any]], Script]
    url: str = ""
    seen: list[Seen] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                hdrs = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                raw = await reader.readexactly(int(hdrs.get("content-length", "0")))
                body = json.loads(raw) if raw else None
                self.seen.append(Seen(method, path, body))
                if not await self.answer(method, path, body, writer):
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def answer(self, method: str, path: str, body: Any, writer: asyncio.StreamWriter) -> bool:
        """Write the answer; False when the connection must close."""
        if method == "GET" and path == "/v1/models":
            return await _plain(writer, 200, json.dumps({"object": "list", "data": [{"id": MODEL}]}).encode())
        if method != "POST" or path not in ("/v1/completions", "/v1/chat/completions"):
            return await _plain(writer, 404, b'{"error": {"message": "not found"}}')
        script = self.script_for(body)
        if script.raw is not None:
            writer.write(script.raw)
            await writer.drain()
            return False
        if script.body is not None or script.status != 200:
            return await _plain(writer, script.status, script.body or b"", script.content_type)
        return await _stream(writer, script, body, chat=path.endswith("chat/completions"))


async def _plain(writer: asyncio.StreamWriter, status: int, body: bytes,
                 content_type: str = "application/json") -> bool:
    writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
                 .encode() + body)
    await writer.drain()
    return True


def _chunk(writer: asyncio.StreamWriter, text: str) -> None:
    data = text.encode()
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")


def _token_event(k: int, n: int, chat: bool) -> str:
    finish = "length" if k == n - 1 else None
    choice: dict[str, Any] = ({"index": 0, "delta": {"content": f" w{k}"}, "finish_reason": finish} if chat
                              else {"index": 0, "text": f" w{k}", "finish_reason": finish})
    return "data: " + json.dumps({"id": "x", "choices": [choice], "usage": None}) + "\n\n"


async def _stream(writer: asyncio.StreamWriter, script: Script, body: dict[str, Any], chat: bool) -> bool:
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    writer.write(f"HTTP/1.1 200 OK\r\nContent-Type: {script.content_type}\r\nTransfer-Encoding: chunked\r\n\r\n"
                 .encode())
    await writer.drain()
    if script.events is not None:
        _chunk(writer, script.events)
    else:
        n = script.tokens if script.tokens is not None else int(body["max_tokens"])
        for k in range(n):
            await asyncio.sleep(max(0.0, t0 + script.ttft_s + k * script.itl_s - loop.time()))
            if script.drop_after is not None and k >= script.drop_after:
                writer.transport.abort()          # the connection drops mid-stream: no end of the chunked body
                return False
            _chunk(writer, _token_event(k, n, chat))
            await writer.drain()
            if script.error_event is not None:
                _chunk(writer, "data: " + json.dumps({"error": {"message": script.error_event}}) + "\n\n")
                break
        if script.usage:
            prompt = body["messages"][0]["content"] if chat else body["prompt"]
            usage = {"prompt_tokens": len(prompt) // 4, "completion_tokens": n, "total_tokens": len(prompt) // 4 + n}
            _chunk(writer, "data: " + json.dumps({"id": "x", "choices": [], "usage": usage}) + "\n\n")
    if script.done:
        _chunk(writer, "data: [DONE]\n\n")
    writer.write(b"0\r\n\r\n")
    await writer.drain()
    return True


@contextmanager
def running(script_for: Callable[[dict[str, Any]], Script]) -> Iterator[FaultyServer]:
    """Serve on 127.0.0.1:<free port> in a thread while the block runs; then stop, cancelling open answers."""
    server = FaultyServer(script_for)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict[str, Any] = {}

    async def main() -> None:
        srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        server.url = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}"
        holder["srv"] = srv
        started.set()
        async with srv:
            await srv.serve_forever()

    def run() -> None:
        asyncio.set_event_loop(loop)
        task = loop.create_task(main())
        holder["task"] = task
        try:
            loop.run_until_complete(task)
        except asyncio.CancelledError:
            pass
        finally:
            for t in asyncio.all_tasks(loop):
                t.cancel()
            loop.run_until_complete(asyncio.sleep(0))
            loop.close()

    thread = threading.Thread(target=run, name="faulty-openai-server", daemon=True)
    thread.start()
    if not started.wait(10):
        raise RuntimeError("the test server did not start")
    try:
        yield server
    finally:
        loop.call_soon_threadsafe(holder["task"].cancel)
        thread.join(timeout=10)
