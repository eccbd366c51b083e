"""`clusterfit twin`: serve an OpenAI-compatible endpoint whose tokens follow a simulated cluster (the twin extra)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .options import (CatalogOpt, DpOpt, EnforceEagerOpt, EngineOpt, EpOpt, GpuMemoryUtilizationOpt, KvDtypeOpt,
                      LongerContextOpt, MaxNumBatchedTokensOpt, MaxNumSeqsOpt, PpOpt, PrecisionOpt, TpOpt,
                      engine_settings, given)


def twin_command(
    model: Annotated[str, typer.Argument(help="HF id, alias or path to a config.json")],
    system: Annotated[str, typer.Option("--system", "-s", help="System id or GPU name (h200, dgx_b200, ...)")],
    gpus: Annotated[Optional[int], typer.Option(help="GPUs per replica (default: the fewest that fit)")] = None,
    tp: TpOpt = None,
    pp: PpOpt = None,
    ep: EpOpt = None,
    dp: DpOpt = None,
    precision: PrecisionOpt = None,
    kv_dtype: KvDtypeOpt = None,
    engine: EngineOpt = "vllm",
    max_num_seqs: MaxNumSeqsOpt = None,
    max_num_batched_tokens: MaxNumBatchedTokensOpt = None,
    gpu_memory_utilization: GpuMemoryUtilizationOpt = None,
    enforce_eager: EnforceEagerOpt = False,
    replicas: Annotated[int, typer.Option(help="Replicas behind the load balancer")] = 1,
    policy: Annotated[str, typer.Option(
        help="Load balancer: round_robin, random, least_outstanding, least_kv, power_of_two, affinity")]
    = "least_outstanding",
    seed: Annotated[int, typer.Option(help="Seed of the balancer's random choices")] = 0,
    served_model_name: Annotated[Optional[list[str]], typer.Option(
        help="Name clients send as `model` (repeat for aliases; default: MODEL)")] = None,
    max_model_len: Annotated[Optional[int], typer.Option(
        help="Longest prompt + output, tokens (default: the model's max_position_embeddings)")] = None,
    chat_max_tokens: Annotated[int, typer.Option(
        help="Output tokens of a chat request without max_tokens (capped by the context left)")] = 256,
    max_outstanding: Annotated[int, typer.Option(
        help="Most requests in flight; beyond it the twin answers 503 (bounds its memory)")] = 10_000,
    history: Annotated[int, typer.Option(help="Finished requests kept for GET /twin/requests")] = 10_000,
    host: Annotated[str, typer.Option(help="Address to listen on (default: loopback only; 0.0.0.0 exposes it)")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="TCP port (0: any free port)")] = 8000,
    catalog: CatalogOpt = None,
    allow_longer_context: LongerContextOpt = False,
) -> None:
    """Serve a twin of MODEL on SYSTEM: an OpenAI-compatible API whose tokens follow the simulated cluster."""
    from ..schema import parse_request
    from ..twin import TwinRequest

    req = parse_request(TwinRequest, given(
        model=model, system=system, gpus=gpus, tp=tp, pp=pp, ep=ep, dp=dp, precision=precision, kv_dtype=kv_dtype,
        engine=engine, replicas=replicas, policy=policy, seed=seed, served_model_name=served_model_name,
        max_model_len=max_model_len, allow_longer_context=allow_longer_context or None,
        chat_max_tokens=chat_max_tokens, max_outstanding=max_outstanding, history=history, catalog=catalog,
        **engine_settings(max_num_seqs, max_num_batched_tokens, gpu_memory_utilization, enforce_eager)))
    from ..twin import make_app
    from ..twin.app import describe_twin
    from ..twin.server import bind, server_for

    app = make_app(req)  # compiles the replica: bad names fail here, before the port is taken
    sock = bind(host, port)
    d = describe_twin(app.state.twin)
    shown = f"[{host}]" if ":" in host else host
    typer.echo(f"clusterfit twin: {d['model']} on {d['replicas']} x {d['gpus_per_replica']} {d['gpu']} "
               f"({d['layout']}, {d['engine']}, {d['precision']}, KV {d['kv_capacity_tokens_per_replica']:,} tokens "
               f"per replica), policy {d['policy']}", err=True)
    typer.echo(f"OpenAI API at http://{shown}:{sock.getsockname()[1]}/v1 (models: "
               f"{', '.join(d['served_model_names'])}); /metrics, /health, /twin; Ctrl-C stops", err=True)
    server_for(app).run(sockets=[sock])
