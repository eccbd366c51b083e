"""config.json of a model that is not bundled, fetched from the Hugging Face Hub and cached on disk.

``fetch_config("org/name")`` returns the parsed config.json of a Hub repository:

- from the cache when a copy is there: ``$CLUSTERFIT_CACHE/hub`` if set, else ``$XDG_CACHE_HOME/clusterfit/hub``,
  else ``~/.cache/clusterfit/hub`` (the XDG base-directory rule platformdirs applies on Linux), one file per
  repository and revision: ``<org>/<name>/<revision>/config.json``; delete it to fetch again;
- else from ``{HF_ENDPOINT}/{org}/{name}/resolve/{revision}/config.json`` (``HF_ENDPOINT`` defaults to
  https://huggingface.co, the variable huggingface_hub honours for mirrors), with ``Authorization: Bearer
  $HF_TOKEN`` when ``HF_TOKEN`` is set (gated and private repositories; the header is not forwarded on a redirect);
- never from the network when ``CLUSTERFIT_OFFLINE`` or ``HF_HUB_OFFLINE`` is set to 1/true/yes/on.

The response is read up to ``clusterfit.inputs.MAX_DOCUMENT_BYTES`` and parsed with the rules of a local config
file (``clusterfit.arch.parse_config_text``: UTF-8 JSON, bounded nesting); only a config that
``clusterfit.arch.parse_config`` accepts is written to the cache (via a temporary file and a rename). Every failure
is a ClusterfitError saying what to do, e.g. how to pass a local config.json instead (the MODEL argument of the
command line takes a path). The HTTP API (``clusterfit serve``) never reaches this module: it accepts bundled names
and inline configs only (``clusterfit.web.custom_model``).
"""

from __future__ import annotations

import os
import re
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from .errors import ClusterfitError
from .inputs import MAX_DOCUMENT_BYTES, http_url_problem

#: The public Hub; ``HF_ENDPOINT`` overrides it (huggingface_hub's variable for mirrors and private hubs).
DEFAULT_ENDPOINT = "https://huggingface.co"
#: Seconds to wait for the Hub to connect and to answer.
TIMEOUT_S = 20.0
#: A Hub repository id: ``org/name`` of letters, digits, '-', '_', '.' (huggingface_hub's repo-id rule: at most
#: 96 characters per part, no '--' or '..').
_PART = r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}"
_REPO_ID = re.compile(rf"{_PART}/{_PART}")
_REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_TRUE = ("1", "true", "yes", "on")


def is_repo_id(name: str) -> bool:
    """Whether ``name`` has the form of a Hub repository id (``org/name``)."""
    return bool(_REPO_ID.fullmatch(name)) and ".." not in name and "--" not in name


def offline() -> bool:
    """Whether the network is off limits: ``CLUSTERFIT_OFFLINE`` or ``HF_HUB_OFFLINE`` set to 1/true/yes/on."""
    return any(os.environ.get(v, "").strip().lower() in _TRUE for v in ("CLUSTERFIT_OFFLINE", "HF_HUB_OFFLINE"))


def endpoint() -> str:
    """The Hub base URL: ``HF_ENDPOINT`` or https://huggingface.co (http or https only)."""
    url = os.environ.get("HF_ENDPOINT", "").strip().rstrip("/") or DEFAULT_ENDPOINT
    problem = http_url_problem(url)
    if problem is not None:
        raise ClusterfitError(f"HF_ENDPOINT must be an http(s) URL: it {problem}, got {url!r}")
    return url


def cache_dir() -> Path:
    """Where fetched configs are kept: ``$CLUSTERFIT_CACHE/hub``, ``$XDG_CACHE_HOME/clusterfit/hub`` or
    ``~/.cache/clusterfit/hub``."""
    root = os.environ.get("CLUSTERFIT_CACHE", "").strip()
    if root:
        return Path(root).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "clusterfit" / "hub"


def cached_path(repo_id: str, revision: str = "main") -> Path:
    """The cache file of ``repo_id``'s config.json at ``revision`` (whether or not it exists)."""
    org, name = repo_id.split("/", 1)
    return cache_dir() / org / name / revision / "config.json"


def _local_hint(repo_id: str) -> str:
    return (f"download {repo_id}'s config.json and pass its path instead of the name (e.g. `clusterfit fit "
            f"path/to/config.json --system h200`; the MODEL argument takes a config.json or a folder holding one)")


def fetch_config(repo_id: str, revision: str = "main") -> dict[str, Any]:
    """The config.json of Hub repository ``repo_id`` (``org/name``) at ``revision``: from the cache, else fetched
    and, once ``clusterfit.arch.parse_config`` accepts it, cached. ClusterfitError when it cannot be had."""
    if not is_repo_id(repo_id):
        raise ClusterfitError(f"'{repo_id}' is not a Hugging Face model id (org/name of letters, digits, '-', '_', "
                              "'.')")
    if not _REVISION.fullmatch(revision) or ".." in revision:
        raise ClusterfitError(f"revision '{revision}' is not a branch, tag or commit name")
    from .arch import checked_parse, parse_config_text

    path = cached_path(repo_id, revision)
    if path.is_file():
        from .inputs import read_text

        return parse_config_text(read_text(path, "cached model config"), str(path))
    if offline():
        raise ClusterfitError(f"model '{repo_id}' is not bundled and the network is off (CLUSTERFIT_OFFLINE / "
                              f"HF_HUB_OFFLINE): its config.json cannot be fetched from the Hugging Face Hub; "
                              f"{_local_hint(repo_id)}")
    base = endpoint()
    url = f"{base}/{repo_id}/resolve/{urllib.parse.quote(revision)}/config.json"
    text = _download(url, repo_id, base)
    config = parse_config_text(text, f"{repo_id} config.json from {base}")
    checked_parse(config, repo_id.split("/", 1)[1], repo_id)  # refuse (and do not cache) what clusterfit cannot read
    _store(path, text)
    return config


def _download(url: str, repo_id: str, base: str) -> str:
    """GET ``url``: the body as text, at most MAX_DOCUMENT_BYTES; HTTP and network failures as ClusterfitError."""
    from . import __version__

    req = urllib.request.Request(url, headers={"User-Agent": f"clusterfit/{__version__}"})
    token = os.environ.get("HF_TOKEN", "").strip()
    if token:
        req.add_unredirected_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:  # noqa: S310 (http/https checked above)
            data = resp.read(MAX_DOCUMENT_BYTES + 1)
    except urllib.error.HTTPError as exc:
        raise _http_error(exc.code, repo_id, base, bool(token)) from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise ClusterfitError(f"cannot fetch {repo_id}'s config.json from {base} ({reason}); it is not bundled "
                              f"(see `clusterfit models`): {_local_hint(repo_id)}") from None
    if len(data) > MAX_DOCUMENT_BYTES:
        raise ClusterfitError(f"{repo_id}'s config.json from {base} is larger than {MAX_DOCUMENT_BYTES:,} bytes; "
                              "refused")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ClusterfitError(f"{repo_id}'s config.json from {base} is not UTF-8 text") from None


def _http_error(status: int, repo_id: str, base: str, token_sent: bool) -> ClusterfitError:
    if status in (401, 403):
        why = ("HF_TOKEN was sent and refused: it needs read access to the repository, and its license must be "
               "accepted on the model page" if token_sent else
               "a gated or private repository: accept its license on the model page and set HF_TOKEN to an access "
               "token with read access")
        return ClusterfitError(f"the Hugging Face Hub ({base}) refused {repo_id}'s config.json (HTTP {status}): "
                               f"{why}; or {_local_hint(repo_id)}")
    if status == 404:
        return ClusterfitError(f"no config.json for '{repo_id}' on {base} (HTTP 404): check the model id "
                               "(org/name, as on the model page); bundled models: `clusterfit models`")
    return ClusterfitError(f"the Hugging Face Hub ({base}) answered HTTP {status} for {repo_id}'s config.json; "
                           f"try again later, or {_local_hint(repo_id)}")


def _store(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temporary file + rename); a cache that cannot be written is skipped."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".config-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        pass  # read-only home or full disk: the config was fetched and is used; it is fetched again next time
