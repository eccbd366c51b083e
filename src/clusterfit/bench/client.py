"""One streamed request to an OpenAI-compatible server (httpx + httpx-sse), timed the way ``vllm bench serve`` times
it (vllm/benchmarks/lib/endpoint_request_func.py ``async_request_openai_completions`` /
``async_request_openai_chat_completions``, read at vllm-project/vllm commit 02cfb534).

The body: ``model``, ``prompt`` (completions) or one user message (chat), ``max_tokens``, ``stream: true``,
``stream_options: {include_usage: true}`` (the last event then carries ``usage``), and ``ignore_eos: true`` unless
turned off: a vLLM / SGLang sampling parameter that keeps generating past the end-of-sequence token so every answer
has ``max_tokens`` tokens; servers without it may stop early (counted in ``short_outputs``) or refuse it (HTTP 400:
turn it off). ``max_tokens`` is sent for chat too (OpenAI's newer name is ``max_completion_tokens``; vLLM, SGLang and
TensorRT-LLM accept both). ``OPENAI_API_KEY`` from the environment, when set, is sent as a bearer token (as vLLM's
client does). Proxy variables are ignored: a proxy would be part of the latency measured.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
from httpx_sse import EventSource, SSEError

from .result import RequestRecord

#: Bytes of an error response kept for its message.
_ERROR_BODY_BYTES = 2048


class RequestFailed(Exception):
    """A request that did not complete: ``reason`` is one of result.FAILURE_REASONS, ``detail`` what was seen."""

    def __init__(self, reason: str, detail: str, http_status: int | None = None) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.http_status = http_status


@dataclass
class StreamTiming:
    """Clock readings (``time.perf_counter`` seconds) of a stream's chunks that carry a choice, and its usage."""

    first: float | None = None
    last: float | None = None
    gaps: list[float] = field(default_factory=list)
    chunks: int = 0
    text_chunks: int = 0
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    finish_reason: str | None = None


def request_body(endpoint: str, model: str, prompt: str, max_tokens: int, ignore_eos: bool) -> dict[str, Any]:
    """The JSON body of one streamed completions or chat request."""
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "stream": True,
                            "stream_options": {"include_usage": True}}
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if ignore_eos:
        body["ignore_eos"] = True
    return body


def headers() -> dict[str, str]:
    """Request headers: SSE accepted; the OPENAI_API_KEY bearer token when the variable is set."""
    out = {"Accept": "text/event-stream"}
    key = os.environ.get("OPENAI_API_KEY")
    if key:
        out["Authorization"] = f"Bearer {key}"
    return out


def _snippet(text: str, limit: int = 200) -> str:
    one = " ".join(text.split())
    return one if len(one) <= limit else one[:limit] + "..."


def describe_error(exc: BaseException) -> str:
    """What went wrong, in words: the operating system's reason at the root of ``exc`` where there is one
    ('Connection refused', 'Name or service not known'), else ``exc``'s own message."""
    root: BaseException | None = exc
    seen = 0
    while root is not None and seen < 16:
        if isinstance(root, OSError) and root.errno is not None and root.strerror:
            text = os.strerror(root.errno) if root.errno > 0 else root.strerror
            return _snippet(f"{text} ({type(exc).__name__})")
        root = root.__cause__ or root.__context__
        seen += 1
    return _snippet(str(exc).rstrip(".") or type(exc).__name__)


def _tokens(usage: dict[str, Any], key: str) -> int | None:
    v = usage.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise RequestFailed("malformed", f"usage.{key} is not a token count: {v!r}")
    return v


def _choice_text(choice: Any, endpoint: str) -> str | None:
    """The text of a streamed choice (completions: ``text``; chat: ``delta.content``)."""
    if not isinstance(choice, dict):
        raise RequestFailed("malformed", f"a choice is not an object: {_snippet(repr(choice))}")
    if endpoint == "chat":
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            raise RequestFailed("malformed", f"a chat chunk without a delta object: {_snippet(json.dumps(choice))}")
        text = delta.get("content")
    else:
        text = choice.get("text")
    if text is not None and not isinstance(text, str):
        raise RequestFailed("malformed", f"chunk text is not a string: {text!r}")
    return text


def take_event(data: str, endpoint: str, timing: StreamTiming, now: float) -> bool:
    """Account one SSE event's data received at ``now``; True when it is ``[DONE]``. A payload that is not an
    OpenAI stream chunk raises RequestFailed (malformed, or stream_error for an error object)."""
    if data.strip() == "[DONE]":
        return True
    try:
        obj = json.loads(data)
    except ValueError:
        raise RequestFailed("malformed", f"event data is not JSON: {_snippet(data)!r}") from None
    if not isinstance(obj, dict):
        raise RequestFailed("malformed", f"event data is not a JSON object: {_snippet(data)!r}")
    if obj.get("error") is not None:
        err = obj["error"]
        msg = err.get("message", err) if isinstance(err, dict) else err
        raise RequestFailed("stream_error", _snippet(str(msg)))
    choices, usage = obj.get("choices"), obj.get("usage")
    if choices is None and usage is None:
        raise RequestFailed("malformed", f"an event with neither choices nor usage: {_snippet(data)!r}")
    if choices is not None and not isinstance(choices, list):
        raise RequestFailed("malformed", f"choices is not a list: {_snippet(data)!r}")
    if choices:
        text = _choice_text(choices[0], endpoint)
        if timing.first is None:
            timing.first = now
        else:
            assert timing.last is not None
            timing.gaps.append(now - timing.last)
        timing.last = now
        timing.chunks += 1
        timing.text_chunks += 1 if text else 0
        timing.finish_reason = choices[0].get("finish_reason") or timing.finish_reason
    if usage is not None:
        if not isinstance(usage, dict):
            raise RequestFailed("malformed", f"usage is not an object: {_snippet(data)!r}")
        timing.completion_tokens = _tokens(usage, "completion_tokens")
        timing.prompt_tokens = _tokens(usage, "prompt_tokens")
    return False


async def read_stream(response: httpx.Response, endpoint: str, timing: StreamTiming | None = None,
                      clock: Callable[[], float] = time.perf_counter) -> StreamTiming:
    """Read an OpenAI SSE stream to ``data: [DONE]``, timing each chunk that carries a choice into ``timing`` (which
    keeps what came before a failure). A stream that is not SSE, holds a malformed event, carries an error, has no
    chunk with a choice, or ends before ``[DONE]`` raises RequestFailed."""
    timing = StreamTiming() if timing is None else timing
    try:
        async for sse in EventSource(response).aiter_sse():
            now = clock()
            if not sse.data:
                continue                      # an event with no data (a keep-alive ping)
            if take_event(sse.data, endpoint, timing, now):
                break
        else:
            raise RequestFailed("dropped", f"the stream ended before data: [DONE] (after {timing.chunks} chunks)")
    except SSEError as exc:
        raise RequestFailed("malformed", str(exc)) from None
    if timing.first is None:
        raise RequestFailed("malformed", "no chunk with a choice before data: [DONE]")
    return timing


async def _error_detail(response: httpx.Response) -> str:
    """The message of an error response (its JSON ``error.message``/``message``/``detail``, else its text)."""
    raw = b""
    async for part in response.aiter_bytes():
        raw += part
        if len(raw) >= _ERROR_BODY_BYTES:
            break
    text = raw[:_ERROR_BODY_BYTES].decode("utf-8", "replace")
    try:
        obj = json.loads(text)
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        err = obj.get("error")
        msg = err.get("message") if isinstance(err, dict) else err
        msg = msg or obj.get("message") or obj.get("detail")
        if msg:
            text = str(msg)
    reason = response.reason_phrase or ""
    return _snippet(f"HTTP {response.status_code} {reason}".strip() + (f": {text}" if text.strip() else ""))


async def send_request(client: httpx.AsyncClient, url: str, body: dict[str, Any], endpoint: str, timeout_s: float,
                       record: RequestRecord, origin: float) -> RequestRecord:
    """Send one streamed request and fill ``record`` (times in s after ``origin``, a perf_counter reading): the
    timing of a completed request, or the failure's reason and detail. Never raises for a server's behaviour."""
    t0 = time.perf_counter()
    record.sent_s = t0 - origin
    timing = StreamTiming()
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("POST", url, json=body, headers=headers()) as response:
                if not 200 <= response.status_code < 300:
                    raise RequestFailed(f"http_{response.status_code}", await _error_detail(response),
                                        response.status_code)
                await read_stream(response, endpoint, timing)
    except RequestFailed as exc:
        _fail(record, exc.reason, exc.detail, t0, exc.http_status)
    except (TimeoutError, httpx.TimeoutException) as exc:
        _fail(record, "timeout", f"no complete answer within {timeout_s:g} s ({type(exc).__name__})", t0)
    except httpx.ConnectError as exc:
        _fail(record, "connect", describe_error(exc), t0)
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
        _fail(record, "dropped", f"the connection closed before the answer ended: {describe_error(exc)}", t0)
    except httpx.DecodingError as exc:
        _fail(record, "malformed", _snippet(f"the body cannot be decoded: {exc}"), t0)
    except httpx.HTTPError as exc:
        _fail(record, "client_error", _snippet(f"{type(exc).__name__}: {exc}"), t0)
    else:
        assert timing.last is not None  # read_stream requires a chunk with a choice
        record.e2e_s = timing.last - t0
        record.usage_reported = timing.completion_tokens is not None
        record.output_tokens = timing.completion_tokens if timing.completion_tokens is not None \
            else timing.text_chunks
        record.prompt_tokens = timing.prompt_tokens
    # what streamed, also before a failure (a dropped stream shows how far it got)
    record.ttft_s = None if timing.first is None else timing.first - t0
    record.chunks = timing.chunks
    record.finish_reason = timing.finish_reason
    if timing.gaps:
        record.itl_s = np.asarray(timing.gaps)
    return record


def _fail(record: RequestRecord, reason: str, detail: str, t0: float, http_status: int | None = None) -> None:
    record.error = reason
    record.detail = detail
    record.http_status = http_status
    record.e2e_s = time.perf_counter() - t0
