"""The OpenAI API surface of the twin: request bodies, prompt lengths, responses and server-sent-event chunks.

Shapes follow OpenAI's API reference (Completions: ``text_completion`` objects; Chat Completions:
``chat.completion`` and ``chat.completion.chunk``; errors: ``{"error": {"message", "type", "param", "code"}}``) and
what vLLM's OpenAI server adds (``stop_reason``, extra sampling fields accepted and ignored). Streams end with
``data: [DONE]``.

Lengths (the twin has no tokenizer):
- a text prompt counts ``ceil(characters / 4)`` tokens, at least 1 (``CHARS_PER_TOKEN``); a chat prompt counts the
  characters of every message's text content together (no chat-template tokens are added);
- a prompt given as token ids counts its ids; ``prompt_tokens`` (an extension field: an integer) overrides both;
- the output is exactly ``max_tokens`` tokens (``max_completion_tokens`` for chat): the twin never stops early, so
  ``finish_reason`` is always ``"length"``. Without it: 16 for completions (OpenAI's and vLLM's default), the twin's
  ``chat_max_tokens`` for chat, capped by the context left.
- Each output token is the filler text ``" tok"`` (4 characters: a reply pasted back as a prompt counts the same).
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, ValidationError

from ..inputs import NumbersAsNumbers, RefuseBool
from ..schema import MAX_TOKENS
from .config import CHARS_PER_TOKEN, COMPLETION_DEFAULT_MAX_TOKENS

FILLER = " tok"
MAX_CHOICES = 128  # n x prompts per request (OpenAI's upper bound for n)


class ApiError(Exception):
    """An error answered as OpenAI does: HTTP ``status`` and ``{"error": {...}}``."""

    def __init__(self, status: int, message: str, param: str | None = None, kind: str = "invalid_request_error",
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.kind = kind
        self.code = code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


class _Open(RefuseBool, NumbersAsNumbers):
    """Fields the twin reads; every other field (temperature, top_p, stop, seed, ignore_eos, ...) is accepted and
    ignored, as vLLM does with sampling fields a request may carry. ``max_tokens: true`` is not 1 token, nor is
    ``"max_tokens": "5"`` 5 (a number sent over HTTP is a JSON number, as in the web API's bodies)."""

    model_config = ConfigDict(extra="allow")


class StreamOptions(_Open):
    include_usage: bool = False


class _Body(_Open):
    """Token counts are bounded by schema.MAX_TOKENS, as everywhere in clusterfit (far above any context length:
    a larger one is refused by name, not echoed back digit by digit in the context-length message)."""

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    n: int = Field(1, ge=1, le=MAX_CHOICES)
    stream: bool = False
    stream_options: StreamOptions | None = None
    prompt_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS,
                                      description="Prompt length, tokens (the twin's extension)")


#: A prompt token id: non-negative, within int32 (vLLM refuses ids outside the vocabulary; the twin counts them); a
#: JSON number (strict: "5" is not an id, as NumbersAsNumbers refuses it in the body's own number fields).
TokenId = Annotated[int, Field(ge=0, le=2**31 - 1, strict=True)]


class CompletionBody(_Body):
    prompt: str | list[TokenId] | list[str] | list[list[TokenId]]


class ContentPart(_Open):
    type: str
    text: str | None = None


#: The authors a chat message may have: OpenAI's Create chat completion request, ``messages`` items
#: (ChatCompletionRequestMessage in openai/openai-openapi's openapi.yaml) are developer, system, user, assistant and
#: tool messages, and function messages (deprecated in favour of tool messages, still accepted by the API).
ChatRole = Literal["developer", "system", "user", "assistant", "tool", "function"]


class Message(_Open):
    role: ChatRole
    content: str | list[ContentPart] | None = None


class ChatBody(_Body):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)


def parse_body(cls: type[_Body], data: Any) -> Any:
    """Validate a JSON body; the first problem becomes a 400 naming the field."""
    if not isinstance(data, dict):
        raise ApiError(400, "the request body must be a JSON object")
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        got = "" if err["type"] == "missing" else f", got {json.dumps(err.get('input'), default=str)[:80]}"
        raise ApiError(400, f"{loc}: {err['msg']}{got}", param=loc) from None


def text_tokens(text: str) -> int:
    """Tokens of a text prompt: ``ceil(characters / CHARS_PER_TOKEN)``, at least 1."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def completion_prompts(body: CompletionBody) -> list[int]:
    """Prompt lengths of a completion request, one per prompt, tokens."""
    p = body.prompt
    if isinstance(p, str):
        lengths = [text_tokens(p)]
    elif not p:
        raise ApiError(400, "prompt: must not be empty", param="prompt")
    elif isinstance(p[0], int):
        lengths = [len(p)]
    else:
        lengths = []
        for item in p:
            if isinstance(item, str):
                lengths.append(text_tokens(item))
            elif item:
                lengths.append(len(item))
            else:
                raise ApiError(400, "prompt: a token list must not be empty", param="prompt")
    if body.prompt_tokens is not None:
        lengths = [body.prompt_tokens] * len(lengths)
    return lengths


def chat_prompt(body: ChatBody) -> int:
    """Prompt length of a chat request, tokens (the text of every message together)."""
    if body.prompt_tokens is not None:
        return body.prompt_tokens
    chars = 0
    for i, msg in enumerate(body.messages):
        if isinstance(msg.content, str):
            chars += len(msg.content)
        elif msg.content is not None:
            for j, part in enumerate(msg.content):
                if part.type != "text" or part.text is None:
                    raise ApiError(400, f"messages.{i}.content.{j}: the twin serves text only (type {part.type!r})",
                                   param=f"messages.{i}.content")
                chars += len(part.text)
    return max(1, math.ceil(chars / CHARS_PER_TOKEN))


def output_tokens(body: _Body, prompt: int, max_model_len: int, chat_default: int) -> int:
    """Output tokens of each choice: the request's ``max_tokens`` (chat: or ``max_completion_tokens``), else the
    default; a prompt + output beyond ``max_model_len`` is a 400 with vLLM's wording."""
    given = body.max_tokens
    if isinstance(body, ChatBody) and body.max_completion_tokens is not None:
        given = body.max_completion_tokens
    if given is None:
        given = COMPLETION_DEFAULT_MAX_TOKENS if isinstance(body, CompletionBody) else \
            max(1, min(chat_default, max_model_len - prompt))
    if prompt + given > max_model_len:
        where = "messages" if isinstance(body, ChatBody) else "prompt"
        raise ApiError(400, f"This model's maximum context length is {max_model_len} tokens. However, you requested "
                       f"{prompt + given} tokens ({prompt} in the {where}, {given} in the completion). Please reduce "
                       f"the length of the {where} or completion.", param="max_tokens")
    return given


class Chunks:
    """The text of one response: SSE chunks while streaming, the body at the end (choices indexed in job order)."""

    def __init__(self, chat: bool, request_id: str, created: int, model: str) -> None:
        self.chat = chat
        self.id = request_id
        self.created = created
        self.model = model
        obj = "chat.completion.chunk" if chat else "text_completion"
        self._head = (f'data: {{"id":{json.dumps(request_id)},"object":"{obj}","created":{created},'
                      f'"model":{json.dumps(model)},"choices":[')

    def delta(self, index: int, tokens: int, first: bool, finished: bool, usage: dict[str, int] | None = None) -> str:
        """One SSE event carrying ``tokens`` new tokens of choice ``index`` (``finished``: its last)."""
        reason = '"length"' if finished else "null"
        text = FILLER * tokens
        if self.chat:
            role = '"role":"assistant",' if first else ""
            choice = (f'{{"index":{index},"delta":{{{role}"content":"{text}"}},"logprobs":null,'
                      f'"finish_reason":{reason}}}')
        else:
            choice = (f'{{"index":{index},"text":"{text}","logprobs":null,"finish_reason":{reason},'
                      f'"stop_reason":null}}')
        tail = "null" if usage is None else json.dumps(usage)
        return f'{self._head}{choice}],"usage":{tail}}}\n\n'

    def usage_event(self, usage: dict[str, int]) -> str:
        """The last event when the client asked ``stream_options.include_usage``: no choices, the usage."""
        return f'{self._head}],"usage":{json.dumps(usage)}}}\n\n'

    def body(self, outputs: list[int], usage: dict[str, int]) -> dict[str, Any]:
        """A non-streaming response; ``outputs``: tokens of each choice."""
        if self.chat:
            choices: list[dict[str, Any]] = [
                {"index": i, "message": {"role": "assistant", "content": FILLER * n}, "logprobs": None,
                 "finish_reason": "length", "stop_reason": None} for i, n in enumerate(outputs)]
            obj = "chat.completion"
        else:
            choices = [{"index": i, "text": FILLER * n, "logprobs": None, "finish_reason": "length",
                        "stop_reason": None} for i, n in enumerate(outputs)]
            obj = "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": choices,
                "usage": usage}


def usage(prompts: list[int], outputs: list[int]) -> dict[str, int]:
    """OpenAI's usage object; ``prompts`` once per prompt (n choices of one prompt count it once, as vLLM does)."""
    p, c = sum(prompts), sum(outputs)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


DONE_EVENT = "data: [DONE]\n\n"
