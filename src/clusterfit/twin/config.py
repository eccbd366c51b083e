"""What a twin serves: the request (model, system, layout, engine, replicas, policy, serving limits) and its
compiled form (the replica every front end compiles through ``clusterfit.compose``, and the simulator's config)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from ..schema import MAX_GPUS, EngineSettingsRequest, LayoutRequest, ParameterError

if TYPE_CHECKING:
    from ..compose import CompiledReplica
    from ..sim.config import SimulationConfig

#: Characters per prompt token when the client gives text: the rule of thumb OpenAI gives for English text ("one
#: token generally corresponds to ~4 characters of text", help.openai.com, "What are tokens and how to count
#: them?"). A client that needs exact counts passes ``prompt_tokens`` or token ids.
CHARS_PER_TOKEN = 4
#: Output tokens of a completion without ``max_tokens``: 16, the default of OpenAI's Completions API reference
#: (``max_tokens``, "Defaults to 16") and of vLLM's CompletionRequest (vllm/entrypoints/openai/protocol.py).
COMPLETION_DEFAULT_MAX_TOKENS = 16
#: Output tokens of a chat completion without ``max_tokens`` / ``max_completion_tokens``. OpenAI and vLLM generate
#: until the model stops or the context ends; a twin never stops early, so it needs a number: this default (or
#: --chat-max-tokens), capped by the context left after the prompt.
CHAT_DEFAULT_MAX_TOKENS = 256


class TwinRequest(LayoutRequest, EngineSettingsRequest):
    """A twin of a planned cluster: ``replicas`` replicas of ``model`` on ``system`` with the given layout and engine
    behind one OpenAI-compatible endpoint. Keyword arguments of ``clusterfit.twin.make_app`` and the options of
    ``clusterfit twin`` (same names)."""

    model: str = Field(description="HF id, alias or path to a config.json")
    system: str = Field(description="System id or GPU name")
    gpus: int | None = Field(None, ge=1, le=MAX_GPUS, description="GPUs per replica (default: the fewest that fit)")
    precision: str | None = None
    kv_dtype: str | None = None
    engine: str = Field("vllm", description="vllm, sglang or trtllm")
    replicas: int = Field(1, ge=1, le=4096, description="Replicas behind the load balancer")
    policy: str = Field("least_outstanding", description="The simulator's load-balancer policy")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="Seed of the balancer's random choices")
    served_model_name: list[str] | None = Field(None, description="Names clients use (default: MODEL)")
    max_model_len: int | None = Field(None, ge=2, le=100_000_000, description=(
        "Longest prompt + output, tokens (default: the model's max_position_embeddings)"))
    allow_longer_context: bool = Field(False, description="Allow --max-model-len beyond max_position_embeddings")
    chat_max_tokens: int = Field(CHAT_DEFAULT_MAX_TOKENS, ge=1, le=100_000_000, description=(
        "Output tokens of a chat completion that gives no max_tokens (capped by the context left)"))
    max_outstanding: int = Field(10_000, ge=1, le=1_000_000, description=(
        "Most simulated requests in flight across all replicas; beyond it the twin answers 503 (bounds its memory)"))
    history: int = Field(10_000, ge=0, le=1_000_000, description=(
        "Finished requests kept for GET /twin/requests (the oldest are dropped)"))
    exact_steps: bool = Field(False, description="Call the step model every step instead of its tables (slow)")
    catalog: list[Path] = Field(default_factory=list)


@dataclass(frozen=True)
class TwinSetup:
    """A validated twin: the compiled replica, the simulator's config and the serving limits (tokens)."""

    request: TwinRequest
    replica: CompiledReplica
    sim: SimulationConfig
    served_names: tuple[str, ...]
    max_model_len: int

    @property
    def model_id(self) -> str:
        return self.replica.model.name


def build_setup(req: TwinRequest) -> TwinSetup:
    """Compile the replica (``clusterfit.compose``) and the simulator config; errors name the parameter."""
    from ..compose import Catalog, build_replica
    from ..sim.config import SimulationConfig, check_policy

    check_policy(req.policy)
    settings = req.engine_settings()
    rep = build_replica(Catalog.load(req.catalog, settings=settings if settings.given() else None), req.model,
                        req.system, precision=req.precision, kv_dtype=req.kv_dtype, engine=req.engine, gpus=req.gpus,
                        tp=req.tp, pp=req.pp, ep=req.ep, dp=req.dp)
    context = rep.model.max_context
    max_len = req.max_model_len or context
    if max_len is None:
        raise ParameterError("max_model_len", f"{rep.model.name} declares no max_position_embeddings: give one")
    if context is not None and max_len > context and not req.allow_longer_context:
        raise ParameterError("max_model_len", f"{max_len:,} tokens is beyond {rep.model.name}'s context of "
                             f"{context:,} (max_position_embeddings); pass --allow-longer-context if the deployment "
                             "extends it (RoPE scaling)")
    sim = SimulationConfig(replicas=req.replicas, policy=req.policy, seed=req.seed,
                           exact_steps=req.exact_steps)
    names = tuple(req.served_model_name or [req.model])
    if any(not n.strip() for n in names):
        raise ParameterError("served_model_name", "names must not be empty")
    return TwinSetup(req, rep, sim, names, int(max_len))
