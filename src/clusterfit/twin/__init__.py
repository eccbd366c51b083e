"""``clusterfit twin``: an OpenAI-compatible endpoint whose tokens follow a simulated cluster under the load it
actually receives (continuous batching, KV admission, queueing, chunked prefill, preemption, the load balancer), so
that gateways, autoscalers, client timeouts and dashboards can be rehearsed against a planned cluster before it is
rented.

    from clusterfit.twin import make_app, running_twin
    app = make_app(model="meta-llama/Llama-3.1-8B", system="h200", replicas=2)   # an ASGI app (uvicorn)
    with running_twin(model="meta-llama/Llama-3.1-8B", system="h200") as t:      # a loopback server in a thread
        ...  # t.url + "/v1/completions"

Parts: ``config`` (TwinRequest, compiled through clusterfit.compose), ``engine`` (the simulated cluster in
wall-clock time, on clusterfit.sim.online), ``openai`` (request bodies, lengths, chunks), ``metrics`` (vLLM's
Prometheus names), ``app`` (FastAPI routes), ``server`` (uvicorn). Needs the ``twin`` extra. See docs/twin.md.
"""

from typing import Any

from ..errors import ClusterfitError
from .config import CHARS_PER_TOKEN, TwinRequest, TwinSetup, build_setup
from .engine import Stream, Twin, TwinUnavailable

__all__ = ["CHARS_PER_TOKEN", "RunningTwin", "Stream", "Twin", "TwinRequest", "TwinSetup", "TwinUnavailable",
           "build_setup", "make_app", "running_twin"]


def __getattr__(name: str) -> Any:  # the server parts import FastAPI and uvicorn only when asked for
    if name not in ("make_app", "running_twin", "RunningTwin"):
        raise AttributeError(name)
    try:
        from . import app, server
    except ImportError as exc:
        raise ClusterfitError(f"the twin needs the twin extra ({exc.name} is not installed): "
                              "pip install 'clusterfit[twin]'") from None
    return app.make_app if name == "make_app" else getattr(server, name)
