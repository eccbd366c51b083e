"""Models for the HTTP API: a bundled name, or a config.json sent inline in the request body.

The HTTP API never lets a request name a server path. ``bundled_model`` accepts only the bundled names and
aliases (checked against the package's own list, before anything could touch the filesystem), and
``register_config`` parses an inline config.json with ``clusterfit.arch.checked_parse`` and registers the model in
``clusterfit.arch``'s in-memory model cache under a key no file or bundled name can have (``web-config:<hash>``),
so the API functions, which take names, find it there. The cache holds at most ``MAX_CUSTOM`` such models.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from typing import Any

from ..arch import (checked_parse, forget_model, is_loaded, load_bundled, load_variant, model_aliases, register_model,
                    resolve_model_ref)
from ..errors import ClusterfitError, unknown
from ..schema import ParameterError

#: Inline models kept in memory (least recently used are dropped).
MAX_CUSTOM = 128
#: Prefix of the cache keys of inline models; ':' keeps them apart from HF ids (org/name) and aliases.
PREFIX = "web-config:"

_lock = threading.Lock()
_registered: OrderedDict[str, str] = OrderedDict()   # cache key -> display name


def bundled_model(name: str) -> str:
    """The HF id of bundled model ``name`` (an HF id or alias, case-insensitive), loaded into the model cache
    from the package's own data, or ``name`` itself for a checkpoint variant of one (arch.resolve_model_ref:
    '-Instruct', '-FP8', dated suffixes); anything else is a ParameterError.

    Never touches the filesystem outside the package: a path (``/etc/passwd``, ``../x/config.json``) is refused
    as such, and the model is put in the cache under its HF id so that ``load_model`` finds it there without
    looking for a file of that name in the working directory."""

    key = name.strip()
    if not key:
        raise ParameterError("model", "is empty; give a bundled model name (see GET /api/models) or a config")
    aliases = model_aliases()
    hf_id = aliases.get(key.lower())
    if hf_id is not None:
        load_bundled(hf_id)
        return hf_id
    if (key.startswith(("/", ".", "~")) or key.endswith(".json") or "\\" in key or ".." in key
            or key.count("/") > 1 or ":" in key):
        raise ParameterError("model", f"'{key}' is not a bundled model; the HTTP API reads no server files: send "
                             "the config.json content in the request body as `config` (see GET /api/models)")
    ref = resolve_model_ref(key)
    if ref is not None:   # a checkpoint variant of a bundled model (Llama-3.1-8B-Instruct, Qwen3-8B-FP8), kept
        if not _recall(key):   # under its name, so that load_model finds it without looking for a file of that name
            _remember(key, load_variant(key, ref), key)
        return key
    exc = unknown("model", key, sorted(set(aliases.values())) + sorted(aliases))
    raise ParameterError("model", str(exc).replace("`clusterfit models`", "GET /api/models")) from None


def _display_name(name: str | None, config: dict[str, Any]) -> str:
    raw = name or config.get("_name_or_path") or config.get("model_type") or "custom"
    text = str(raw).strip().replace("\\", "/").rsplit("/", 1)[-1] or "custom"
    return "".join(c for c in text if c.isprintable())[:80] or "custom"


def register_config(config: dict[str, Any], name: str | None = None) -> str:
    """Parse an inline config.json and register it; returns the cache key to pass as ``model`` to the API."""
    if not isinstance(config, dict):
        raise ParameterError("config", "must be a JSON object (the content of a Hugging Face config.json)")
    display = _display_name(name, config)
    try:
        digest = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:20]
    except (TypeError, ValueError) as exc:
        raise ParameterError("config", f"is not plain JSON ({exc})") from None
    key = f"{PREFIX}{digest}:{display}"
    if _recall(key):
        return key
    try:
        model = checked_parse(config, name=display)   # a malformed value is a ClusterfitError, not a crash
    except ClusterfitError as exc:
        exc.parameter = exc.parameter or "config"   # the error body names the body field the config came in
        raise
    _remember(key, model, display)
    return key


def _recall(key: str) -> bool:
    """Whether ``key`` is registered and loaded; if so it becomes the most recent (the LRU keeps it longest)."""
    with _lock:
        if key in _registered and is_loaded(key):
            _registered.move_to_end(key)
            return True
    return False


def _remember(key: str, model: Any, display: str) -> None:
    """Register ``model`` under ``key`` for load_model, keeping the MAX_CUSTOM most recent (a server sees any
    number of configs and variant names)."""
    with _lock:
        register_model(key, model)
        _registered[key] = display
        _registered.move_to_end(key)
        while len(_registered) > MAX_CUSTOM:
            old, _ = _registered.popitem(last=False)
            forget_model(old)
