"""The public Python API: one typed path from names to answers, under the CLI (and the HTTP API, page, deploy).

    import clusterfit as cf
    cf.fit(model="zai-org/GLM-5.3", precision="fp8", systems=["h200"], context=32768)       -> FitResult
    cf.perf(model="llama-3.1-8b", system="h200", tp=1, isl=1024, osl=128, batch=1, context=1024) -> PerfResult
    cf.plan(model="deepseek-v3", isl=4096, osl=1024, rate=5, ttft_ms=2000, tpot_ms=50, systems=["h200"]) -> PlanResult
    cf.simulate(model="llama-3.1-8b", system="h200", replicas=4, rate=20, requests=5000, isl=1000, osl=200)

Keyword arguments mirror the command-line options (same names, defaults and validation; see
``clusterfit.schema``); each function also takes the whole request as one model (``cf.fit(FitRequest(...))``).
``result.model_dump(mode="json")`` is what ``--json`` prints. Bad input raises ``ClusterfitError`` (a
``ParameterError`` names the parameter).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .arch import load_model
from .compose import Catalog, CompiledReplica, build_replica
from .precision import experts_format, resolve_precision
from .speculative import check_drafter
from .errors import ClusterfitError, brief
from .schema import (DeployFile, DeployRequest, DeployResult, FitRequest, FitResult, HardwareList, ModelList, LayoutOut, ModelSummary, MostSessions, ParameterError, SessionsFit, PerfRequest, PerfResult, PlanRequest,
                     MAX_GPUS, PlanResult, Schema, ServingEngineSettings, SimResult, SimulateRequest, parse_request)

if TYPE_CHECKING:
    from .arch import ModelArch
    from .perfmodel.step import StepModel
    from .engines import Engine, EngineSettings
    from .hardware import Gpu, System
    from .memory import ReplicaMemoryFit
    from .precision import Precision
    from .sim.cluster import SimRun
    from collections.abc import Callable

    from .calibrate.run import CalibrateRequest
    from .profile import Profile

R = TypeVar("R", bound=Schema)


def _request(cls: type[R], request: R | None, kwargs: dict[str, Any]) -> R:
    if request is not None:
        if kwargs:
            raise ClusterfitError(f"give a {cls.__name__} or keyword arguments, not both")
        if not isinstance(request, cls):
            raise ClusterfitError(f"expected a {cls.__name__}, got {type(request).__name__}")
        return request
    req: R = parse_request(cls, kwargs)
    return req


# ===================================================================================== models, hardware
def _no_more_arguments(function: str, extra: tuple[Any, ...], known: tuple[str, ...]) -> None:
    """A positional argument beyond ``known`` is an error naming the function's arguments (not Python's TypeError)."""
    if extra:
        takes = f"takes {', '.join(known)}" if known else "takes no arguments"
        raise ParameterError(function, f"{function}() {takes}; {len(extra)} more positional argument"
                             f"{'s' if len(extra) > 1 else ''} given ({', '.join(brief(a, 40) for a in extra)})")


def models(*extra: Any, **kwargs: Any) -> ModelList:
    """The bundled model configs, their aliases, sizes and attention kinds. Takes no arguments (any given is a
    ParameterError naming it)."""
    from .arch import list_models, model_aliases

    _no_more_arguments("models", extra, ())
    if kwargs:
        raise ParameterError(next(iter(kwargs)), "is not a parameter of models() (it takes none)")
    aliases = model_aliases()
    rows = []
    for hf_id in list_models():
        m = load_model(hf_id)
        rows.append({"hf_id": hf_id, "aliases": sorted(a for a, h in aliases.items() if h == hf_id and a != hf_id.lower()),
                     "total_params": m.total_params, "active_params": m.active_params,
                     "attention_kinds": m.attention_kinds(), "checkpoint_formats": sorted(set(m.quantization.values()))})
    return ModelList.model_validate({"models": rows})


_UNSET: Any = object()


def model_info(model: str | Path = _UNSET, precision: str | None = None, kv_dtype: str | None = None, *extra: Any,
               **kwargs: Any) -> ModelSummary:
    """Architecture analysis of one model (bundled name, alias, HF id or config.json path, a str or Path):
    parameters by component, layer and attention kinds, KV bytes, FLOPs. Arguments are checked as a
    ``schema.ModelInfoRequest`` (a bad one is a ParameterError naming it)."""
    from .schema import ModelInfoRequest

    _no_more_arguments("model_info", extra, ("model", "precision", "kv_dtype"))
    given = {"precision": precision, "kv_dtype": kv_dtype, **kwargs}
    if model is not _UNSET:
        given["model"] = model
    req: ModelInfoRequest = parse_request(ModelInfoRequest, given)
    m = load_model(req.model)
    return model_summary(m, resolve_precision(m, req.precision, None, req.kv_dtype))


def systems(catalog: list[Path] | list[str] | list[str | Path] | str | Path | None = None, *extra: Any,
            **kwargs: Any) -> HardwareList:
    """The systems of the hardware catalog plus user catalog files (a list of paths, or one path as a str or Path;
    later files win). Arguments are checked as a ``schema.SystemsRequest`` (a bad one is a ParameterError naming
    it)."""
    from .report.hardware_table import hardware_payload
    from .schema import SystemsRequest

    _no_more_arguments("systems", extra, ("catalog",))
    given = {"catalog": [] if catalog is None else catalog, **kwargs}
    req: SystemsRequest = parse_request(SystemsRequest, given)
    return HardwareList.model_validate(hardware_payload(Catalog.load(req.catalog).hardware))


# ================================================================================================= fit
def model_summary(model: ModelArch, precision: Precision | None = None) -> ModelSummary:
    """Architecture facts of ``model`` (parameter counts are element counts), with its formats under
    ``precision`` when given."""
    from .arch import flops_per_token
    from .memory import kv_bytes_per_token

    out: dict[str, Any] = {
        "name": model.name, "hf_id": model.hf_id, "model_type": model.model_type,
        "total_params": model.total_params, "active_params": model.active_params,
        "active_params_excl_embedding": model.active_params_excl_embedding,
        "active_params_non_embedding": model.active_params_non_embedding,
        "params_by_component": {k: v for k, v in model.params.items() if v},
        "layers": model.num_layers, "hidden": model.hidden, "vocab": model.vocab,
        "attention_kinds": model.attention_kinds(), "ffn_kinds": model.ffn_kinds(),
        "mtp_layers": model.mtp_layers, "notes": list(model.notes),
    }
    if model.layers:
        out["flops_per_token"] = {"context_0": flops_per_token(model, 0), "context_32768": flops_per_token(model, 32768)}
        moe = [lyr.ffn for lyr in model.layers if lyr.ffn.kind == "moe"]
        if moe:
            f = moe[0]
            out["moe"] = {"experts": f.num_experts, "top_k": f.top_k, "expert_intermediate": f.expert_intermediate,
                          "shared_experts": f.num_shared, "moe_layers": len(moe)}
    if precision is not None:
        out["precision"] = {c: f.name for c, f in precision.formats.items() if model.params.get(c)}
        out["kv_dtype"] = precision.kv_dtype
        if model.layers:
            out["kv_bytes_per_token"] = int(round(kv_bytes_per_token(model, precision)))
    return ModelSummary.model_validate(out)


def check_context(model: ModelArch, tokens: float, allow: bool, what: str, parameter: str) -> None:
    """Prompt + output beyond the model's max_position_embeddings is an error unless ``allow``."""
    if model.max_context is not None and tokens > model.max_context and not allow:
        raise ParameterError(parameter, f"{what} is {tokens:,.0f} tokens, beyond {model.name}'s context of "
                             f"{model.max_context:,} (max_position_embeddings); pass --allow-longer-context if the "
                             "deployment extends it (RoPE scaling)")


def _dominant_format(model: ModelArch, precision: Precision) -> str:
    comp = max(model.params, key=lambda c: model.params[c] if c not in ("mtp", "vision") else -1)
    return precision.formats[comp].name


def fit(request: FitRequest | None = None, /, **kwargs: Any) -> FitResult:
    """Does the model fit on each system? Naive (params x bytes vs marketed GB) and realistic views."""
    from .arch import bare_model, parse_param_count
    from .layout import layout_from_options
    from .memory import naive_fit, nodes_needed
    from .memory import fit as memory_fit

    req = _request(FitRequest, request, kwargs)
    if (req.model is None) == (req.params is None):
        which = "not both" if req.model is not None else "one of them"
        raise ParameterError("model", f"give a MODEL or --params, {which} (e.g. `clusterfit fit glm-5.3` or "
                             "`clusterfit fit --params 744B --precision fp8`; over HTTP: `model` or `params`)")
    if req.params is not None and req.precision is None:
        raise ParameterError("precision", "is needed with a bare parameter count (--params): bf16, fp8, int4, ...")
    needs_layers = [n for n in ("sessions", "context", "kv_dtype") if n in req.model_fields_set
                    and getattr(req, n) is not None]
    if req.params is not None and needs_layers:   # a parameter count has no KV cache: they would be ignored
        raise ParameterError(needs_layers[0], "needs the model's architecture (a parameter count says nothing of its "
                             "KV cache); give MODEL instead of --params")
    model = bare_model(parse_param_count(req.params)) if req.params is not None else load_model(str(req.model))
    if "context" in req.model_fields_set:
        check_context(model, req.context, req.allow_longer_context, "context", "context")
    elif model.max_context is not None and model.max_context < req.context:
        req = req.model_copy(update={"context": model.max_context})   # the default, within the model's context
    prec = resolve_precision(model, req.precision, req.experts_precision, req.kv_dtype)
    spec = req.speculative_spec()
    if spec is not None:
        check_drafter(model, spec.method)
    catalog = Catalog.load(req.catalog, draft_head=req.draft_head(model, spec.method if spec is not None else None))
    eng = catalog.engine(req.engine).with_settings(req.gpu_memory_utilization, req.max_num_batched_tokens)
    naive_prec = req.precision or _dominant_format(model, prec)
    results = []
    for s in catalog.distinct_systems(req.systems):
        # the engine's defaults on this GPU (vLLM's max_num_seqs / max_num_batched_tokens by device memory), as
        # perf and plan take them, then the user's settings
        eng_s = catalog.engine(req.engine, s).with_settings(req.gpu_memory_utilization, req.max_num_batched_tokens)
        eng_s.check_settings()
        eng_s.check_experts(experts_format(model, prec), s.gpu)
        layout = layout_from_options(model, s, None, req.tp, req.pp, req.ep, req.dp)
        if spec is not None:   # the drafter's weights and KV layers (memory.fit), as perf and plan count them
            eng_s = eng_s.for_speculative(layout.dp if layout is not None else 1, spec.method)
        need = nodes_needed(model, s, prec, eng_s, req.context, req.block_size)
        n = req.nodes or (layout and -(-layout.gpus // s.gpus_per_node)) or need or 1
        r = memory_fit(model, s, prec, layout, n, eng_s, req.context, req.block_size)
        naive = naive_fit(model.total_params, naive_prec, s, req.nodes or 1)
        row = r.as_dict()
        row.update({"nodes_needed": need, "system_name": s.name, "gpu": s.gpu.id, "gpus_per_node": s.gpus_per_node,
                    "naive": naive.as_dict(), "gpu_memory_marketed_bytes": s.gpu.memory_bytes,
                    # the engine's value on this GPU and layout, as the budget used it (SGLang's follows both)
                    "max_num_batched_tokens": eng_s.for_layout(s.gpu, r.layout.tp, r.layout.pp,
                                                               r.layout.dp).max_num_batched_tokens})
        if layout is None and r.fits:
            row["most_sessions"] = _most_sessions_layout(model, s, prec, eng_s, req, n, r)
        if req.sessions is not None:
            sf = _sessions_fit(model, s, prec, eng_s, req, n, r.max_sequences if r.fits else 0)
            row["sessions_fit"] = sf
            if not sf.fit_on_shown_replica:
                row["fits"] = False
                row["reason"] = sf.explanation
        results.append(row)
    return FitResult.model_validate({
        "model": model_summary(model, prec), "precision": prec.name, "engine": eng.name,
        "engine_settings": {"fraction": eng.gpu_memory_utilization, "mode": eng.memory_mode,
                            "max_num_batched_tokens": eng.max_num_batched_tokens, "source": eng.memory_source},
        "context": req.context, "results": results})


def _most_sessions_layout(model: ModelArch, system: System, precision: Precision, engine: Engine, req: FitRequest,
                          nodes: int, shown: Any) -> MostSessions | None:
    """Among the layouts the planner searches on ``nodes`` nodes (TP, TP+EP, attention DP+EP), the one whose
    replica holds the most sequences of ``req.context``; None when none beats the shown layout."""
    from .layout import Layout
    from .memory import fit as memory_fit
    from .planning.layout_candidates import candidate_layouts

    gpus = nodes * system.gpus_per_node
    best = None
    for tp, pp, ep, dp in candidate_layouts(model, system, gpus, gpus).tolist():
        try:
            r = memory_fit(model, system, precision, Layout(tp, pp, ep, dp), nodes, engine, req.context,
                           req.block_size)
        except ClusterfitError:
            continue
        if r.fits and (best is None or r.max_sequences > best.max_sequences):
            best = r
    if best is None or best.max_sequences <= shown.max_sequences:
        return None
    lo, ls = best.layout, shown.layout

    def name(L: Any) -> str:
        return " ".join(f"{k.upper()}{v}" for k, v in (("tp", L.tp), ("pp", L.pp), ("dp", L.dp), ("ep", L.ep))
                        if v > 1 or k == "tp")
    ds, db = shown.as_dict(), best.as_dict()
    per_tok_shown, per_tok_best = ds["kv_bytes_per_token_per_gpu"], db["kv_bytes_per_token_per_gpu"]
    if ls.tp > lo.tp and lo.dp > 1:
        why = (f"under {name(ls)} the TP ranks hold copies of each token's KV ({per_tok_shown:,.0f} B per token on "
               f"each GPU: a replicated MLA latent, or fewer KV heads than ranks), while {name(lo)} gives each "
               f"attention-DP rank its own sequences ({per_tok_best:,.0f} B per token, on one GPU)")
    else:
        why = (f"{name(lo)} leaves more memory for KV cache ({db['kv_budget_bytes'] / 1e9:,.0f} GB "
               f"against {ds['kv_budget_bytes'] / 1e9:,.0f} GB) or stores less of it per token per GPU")
    return MostSessions(layout=LayoutOut(tp=lo.tp, pp=lo.pp, ep=lo.ep, dp=lo.dp), label=name(lo),
                        max_sequences=best.max_sequences, max_kv_tokens=best.max_kv_tokens,
                        shown_max_sequences=shown.max_sequences,
                        explanation=(f"{name(lo)} holds {best.max_sequences} sequences of {req.context} tokens "
                                     f"against {shown.max_sequences} for {name(ls)}: {why}"))


def _sessions_fit(model: ModelArch, system: System, precision: Precision, engine: Engine, req: FitRequest,
                  shown_nodes: int, shown_sequences: int) -> SessionsFit:
    """Whether ``req.sessions`` sessions of ``req.context`` tokens fit on the shown replica, and the fewest nodes
    (replicas of 1..64 nodes with the default layout) that hold them."""
    from .errors import ClusterfitError
    from .memory import fit as memory_fit

    wanted = int(req.sessions or 0)
    best: tuple[int, int, int] | None = None            # (nodes, replicas, nodes per replica)
    for per in range(1, 65):
        try:
            r = memory_fit(model, system, precision, None, per, engine, req.context, req.block_size)
        except ClusterfitError:
            continue
        if not r.fits or r.max_sequences < 1:
            continue
        replicas = -(-wanted // r.max_sequences)
        if best is None or replicas * per < best[0]:
            best = (replicas * per, replicas, per)
        if replicas == 1:
            break                                        # more nodes per replica only add nodes
    ok = shown_sequences >= wanted
    ctx = f"{wanted:,} sessions of {req.context:,} tokens"
    where = f"one replica on {shown_nodes} node(s) holds {shown_sequences:,}"
    if best is None:
        text = f"{ctx}: {where}; no replica of up to 64 nodes holds one"
    else:
        nodes, replicas, per = best
        text = (f"{ctx} {'fit' if ok else 'do not fit'}: {where}; holding them takes {nodes} node(s) "
                f"({replicas} replica(s) of {per} node(s))")
    return SessionsFit(sessions=wanted, fit_on_shown_replica=ok, held_by_shown_replica=shown_sequences,
                       replicas=best[1] if best else None, nodes_per_replica=best[2] if best else None,
                       nodes=best[0] if best else None, explanation=text)


# ================================================================================================ perf
def perf(request: PerfRequest | None = None, /, **kwargs: Any) -> PerfResult:
    """TTFT, TPOT and throughput of one replica under one load (concurrency, max_throughput, or batch + context)."""
    from .perfmodel import predict

    req = _request(PerfRequest, request, kwargs)
    if req.context is not None and req.batch is None:
        raise ParameterError("context", "is the context of a --batch of decoding sequences; give --batch too (or "
                             "drop --context)")
    modes = [name for name, given in (("concurrency", req.concurrency is not None), ("batch", req.batch is not None),
                                      ("max_throughput", req.max_throughput)) if given]
    if len(modes) != 1:
        raise ParameterError(modes[-1] if modes else "concurrency", "give exactly one of concurrency, max throughput "
                             "or batch (its context optional)" + (f"; got {' and '.join(modes).replace('_', ' ')}"
                                                                  if modes else ""))
    if req.context is not None and req.context < req.isl:
        raise ParameterError("context", f"{req.context:,} tokens is less than the prompt (isl {req.isl:,}): a decoding "
                             "sequence holds its prompt, so give a context of at least isl (default isl + osl/2)")
    model = load_model(req.model)
    longest = max(req.isl + req.osl, req.context or 0)
    check_context(model, longest, req.allow_longer_context, "the sequence (isl + osl, or context)",
                  "context" if req.context is not None and req.context >= req.isl + req.osl else "isl")
    settings = req.engine_settings()
    spec = req.speculative_spec()
    head = req.draft_head(model, spec.method if spec is not None else None)
    rep = build_replica(Catalog.load(req.catalog, settings=settings, profile=req.profile, draft_head=head),
                        model, req.system,
                        precision=req.precision,
                        experts_precision=req.experts_precision, kv_dtype=req.kv_dtype, gpus=req.gpus, tp=req.tp,
                        pp=req.pp, ep=req.ep, dp=req.dp, engine=req.engine, require_kv=False,
                        speculative=spec.method if spec is not None else None)
    if req.batch is not None:
        _check_batch_fits(rep.step, req.batch, req.context if req.context is not None else req.isl + req.osl / 2,
                          req.isl + req.osl, "max_num_seqs" in settings.given())
    drafting = spec.for_model(rep.model, rep.engine.draft_head).drafting() if spec is not None else None
    out = predict(rep.model, rep.system, rep.layout, rep.precision, rep.engine, req.isl, req.osl,
                  concurrency=req.concurrency, batch=req.batch, context=req.context,
                  max_throughput=req.max_throughput, step_model=rep.step, drafting=drafting)
    notes: list[str] = list(rep.model.notes)   # what the counts behind these times rest on (as fit and model say)
    if req.profile is not None:
        notes.append(f"kernel curves measured by clusterfit calibrate: {req.profile.summary()}; they replace the "
                     f"shipped H200-derived curves for {', '.join(req.profile.families())}")
    if req.concurrency is not None and req.concurrency > out["batch"]:
        notes.append(_queue_concurrency(rep.step, out, req.concurrency, req.isl, req.osl,
                                        drafting.tokens_per_step if drafting is not None else 1.0))
    if req.osl == 1:
        notes.append("osl 1: the one output token is sampled at the end of the prompt's prefill, so no request "
                     "decodes and TPOT is undefined (tpot_s and tokens_per_s_per_user in --json hold the engine "
                     "step at this load)")
    if spec is not None:
        notes.extend(_drafter_memory_note(rep, spec.method))
    notes.extend(_math_fallback_notes(rep.precision, rep.system.gpu))
    notes.extend(_unoptimised_experts_notes(rep))
    lay = rep.layout
    return PerfResult.model_validate({
        "model": rep.model.name, "system": rep.system.id, "engine": req.engine, "precision": rep.precision.name,
        "kv_dtype": rep.precision.kv_dtype, "layout": {"tp": lay.tp, "pp": lay.pp, "ep": lay.ep, "dp": lay.dp},
        "isl": req.isl, "osl": req.osl, **out, "notes": notes,
        "engine_settings": ServingEngineSettings.of(rep.engine, settings.given()),
        **_perf_intervals(out, rep.engine.name, rep.system.gpu.id, rep.model)})


def _drafter_memory_note(rep: CompiledReplica, method: str) -> list[str]:
    """What the memory counts of the drafter: the EAGLE head's weights (given its config) or that they are not
    counted, and the drafter's KV layers (memory.draft_kv_layers); nothing for n-gram lookup."""
    from .memory import draft_kv_layers, drafter_weight_bytes_per_gpu, uncounted_head_note
    from .speculative import ONE_LAYER_DRAFTERS

    if method not in ONE_LAYER_DRAFTERS:
        return []
    n = draft_kv_layers(rep.model, method, rep.engine.draft_head)
    if method == "mtp":
        return [f"mtp drafts with the checkpoint's {n} MTP layer(s): their weights are loaded and they keep KV in "
                "the target's cache"]
    kv = f"its {n} attention layer(s) keep KV in the target's cache"
    head = drafter_weight_bytes_per_gpu(rep.engine, rep.layout)
    if head:
        return [f"the {method} draft head ({rep.engine.draft_head.layers} layer(s)) takes {head / 1e9:.2f} GB per GPU "
                f"and {kv}"]
    return [f"{uncounted_head_note(method)}; {kv}, sized as the target's"]


def _perf_intervals(out: dict[str, Any], engine: str, gpu_id: str, model: ModelArch) -> dict[str, Any]:
    """The ``*_interval`` keys of a perf result (clusterfit.intervals): TTFT and prefill time in the prefill
    regime, the decode figures in the decode or throughput regime of the running batch."""
    from .intervals import bands_for, decode_regime

    bands = bands_for(engine, gpu_id, model)
    dec = decode_regime(float(out["batch"]))
    return {"ttft_s_interval": bands.time(out["ttft_s"], "prefill"),
            "prefill_s_interval": bands.time(out["prefill_s"], "prefill"),
            "tpot_s_interval": bands.time(out["tpot_s"], dec),
            "decode_step_s_interval": bands.time(out["decode_step_s"], dec),
            "output_tokens_per_s_interval": bands.rate(out["output_tokens_per_s"], dec),
            "output_tokens_per_s_per_gpu_interval": bands.rate(out["output_tokens_per_s_per_gpu"], dec),
            "tokens_per_s_per_user_interval": bands.rate(out["tokens_per_s_per_user"], dec),
            "intervals": bands.basis(["prefill", dec])}


def _math_fallback_notes(precision: Precision, gpu: Gpu) -> list[str]:
    """A note per low-precision weight format whose math the GPU has no tensor cores for (fp4 weights on a Hopper,
    an A100 or an MI300X): the model runs it with the math the step model prices it with (perfmodel.step
    effective_compute_dtype: fp4 in bf16 where there are no fp4 tensor cores; else the next wider math the GPU has),
    which the engine must support."""
    from .perfmodel.step import effective_compute_dtype

    notes = []
    for fmt in sorted(set(precision.formats.values()), key=lambda f: f.name):
        used = gpu.math_dtype(effective_compute_dtype(gpu, fmt.compute_dtype))
        if used != fmt.compute_dtype and fmt.compute_dtype in ("fp4", "fp8", "int8"):
            notes.append(f"{fmt.name} on {gpu.id}: the GPU has no {fmt.compute_dtype} tensor cores; modelled as "
                         f"{fmt.name} weights read from memory with {used} math (check that your engine runs "
                         f"{fmt.name} on this GPU: some run it weight-only, some not at all)")
    return notes


def _unoptimised_experts_notes(rep: CompiledReplica) -> list[str]:
    """A note where the engine runs the routed experts' format on this GPU through a path it calls unoptimised
    (Engine.unoptimised_experts: SGLang's mxfp4 MoE before Hopper), with what was measured there."""
    fmt = experts_format(rep.model, rep.precision)
    measured = rep.engine.unoptimised_experts(fmt, rep.system.gpu)
    if measured is None:
        return []
    return [f"{rep.engine.name} runs {fmt} experts on {rep.system.gpu.id} through a MoE path it logs as not fully "
            f"optimised; this prediction assumes optimised kernels. {measured}"]


def _check_batch_fits(step: StepModel, batch: int, context: float, seq_len: float, capped: bool = False) -> None:
    """A decode batch the KV cache cannot hold is an error naming what it holds; so is one above the sequences the
    engine runs at once (StepModel.running_cap for requests of ``seq_len`` tokens: max_num_seqs, the user's,
    ``capped``, or the engine's default on this GPU; or TensorRT-LLM's max_batch_size by trtllm-bench's rule)."""
    import numpy as np

    from .perfmodel.serving import engine_cap_words

    if batch > step.max_num_seqs:
        whose = "" if capped else ", the engine's default on this GPU"
        raise ParameterError("batch", f"{batch} sequences are more than the engine runs at once (max_num_seqs "
                             f"{step.max_num_seqs:,} over this replica{whose}); lower --batch or raise "
                             "--max-num-seqs")
    if batch > float(np.asarray(step.running_cap(seq_len))):
        raise ParameterError("batch", f"{batch} sequences are more than the engine runs at once "
                             f"({engine_cap_words(step, seq_len)}); lower --batch or raise --max-num-seqs")
    holds = float(np.asarray(step.max_sequences(context)))
    if batch > holds:
        raise ParameterError("batch", f"{batch} sequences at context {context:,.0f} do not fit the KV cache: it holds "
                             f"{holds:.0f} ({step.kv_capacity_tokens:,.0f} tokens)")


def _queue_concurrency(step: StepModel, out: dict[str, Any], concurrency: int, isl: int, osl: int,
                       per_step: float) -> str:
    """Closed loop above the running batch B: the other requests wait for a slot. By Little's law each request
    spends concurrency / throughput in the system, of which one request cycle (osl x TPOT) running, so the mean
    wait is (concurrency / B - 1) x cycle; it is added to ``ttft_s`` in ``out``. Returns the note saying so, with what
    limits B (serving.running_limit; ``per_step``: tokens a decode step emits per sequence)."""
    from .perfmodel.serving import running_limit

    b = float(out["batch"])
    wait = (concurrency / b - 1.0) * osl * float(out["tpot_s"])
    out["ttft_s"] = float(out["ttft_s"]) + wait
    why = running_limit(step, isl, osl, per_step)
    return (f"concurrency {concurrency:,} is above the {b:.0f} requests the replica runs at once (limited by {why}); "
            f"the other {concurrency - b:,.0f} wait for a slot, {wait * 1e3:,.0f} ms on average, included in TTFT")


# ================================================================================================ plan
def plan(request: PlanRequest | None = None, /, **kwargs: Any) -> PlanResult:
    """The cheapest systems, layouts and replica counts that carry the load within the SLOs, with cost."""
    from .planning.planner import plan_cluster
    from .planning.question import build_question

    req = _request(PlanRequest, request, kwargs)
    question = build_question(req)
    if question.catalog is not None and question.catalog.profile is not None:
        from .planning.planner import resolve_systems

        question.catalog.check_profile_gpu(resolve_systems(question.systems, question.catalog))
    wl = question.workload
    check_context(load_model(question.model), wl.isl_mean_tokens + wl.osl_mean_tokens, req.allow_longer_context,
                  "the mean request (isl + osl)", "isl")
    result = plan_cluster(question, verify=req.verify, verify_requests=req.verify_requests)
    catalog = question.catalog
    assert catalog is not None
    if result.engine_settings is None:  # nothing recommended (plan_cluster sets the recommended replica's)
        settings = catalog.settings
        result.engine_settings = ServingEngineSettings.of(catalog.engine(question.engine),
                                                          settings.given() if settings is not None else [])
    return result


# ============================================================================================== deploy
def _checkpoint_to_serve(model: ModelArch, source: str) -> str:
    """What the engine is told to serve: the Hugging Face id, or the checkpoint directory of a config.json given by
    path (``vllm serve DIR``). Anything else (an inline config, a file not named config.json) cannot be deployed.
    (DeploySpec refuses names the launch commands could not carry as plain words.)"""
    if model.checkpoint_id:
        return model.checkpoint_id
    if Path(source).name == "config.json" and Path(source).is_file():
        return str(Path(source).resolve().parent)
    raise ParameterError("model", f"{model.name}: deploy writes the checkpoint the engine serves; give its "
                         "Hugging Face id, or the config.json inside the checkpoint's directory")


#: What deploy takes beside a plan file: where and how to write the files, the row to deploy, the checkpoint.
_USED_WITH_PLAN_FILE = frozenset({"plan_file", "target", "out", "engine", "systems", "model", "catalog",
                                  "max_model_len", "speculative_draft_model", "allow_longer_context"})


def deploy(request: DeployRequest | None = None, /, **kwargs: Any) -> DeployResult:
    """Launch commands, Kubernetes manifests or a Slurm script for a plan (planned here, or ``plan_file``)."""
    from .deploy.render import ENGINE_VERSIONS, DeploySpec, render, write

    req = _request(DeployRequest, request, kwargs)
    engine = req.engine or "vllm"   # a saved plan's own engine when none is given (below)
    if engine not in ENGINE_VERSIONS:
        raise ParameterError("engine", f"{engine!r}: deployment files exist for vllm, sglang, trtllm")
    if req.plan_file is not None:
        from pydantic import ValidationError

        from .inputs import read_document

        asked = [n for n in DeployRequest.model_fields if n in req.model_fields_set and n not in _USED_WITH_PLAN_FILE]
        if asked:   # the plan answers the question it was planned for: these would be ignored
            raise ParameterError(asked[0], f"the plan in {req.plan_file} was sized for its own question; drop it, or "
                                 "plan again with it and deploy that plan")

        document = read_document(req.plan_file, "plan file", "json", "plan_file")
        try:   # strict: a JSON plan holds numbers as numbers ("replicas": "3" is an edit, not a plan)
            result = PlanResult.model_validate(document, strict=True)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err.get("loc", ())) or "plan"
            msg = str(err.get("msg", ""))
            raise ParameterError("plan_file", f"{req.plan_file}: {where}: {msg[:1].lower()}{msg[1:]}, got "
                                 f"{brief(err.get('input'))} (not a `clusterfit plan --json` output)") from None
        if not result.feasible:
            raise ParameterError("plan_file", f"{req.plan_file}: feasible: false: the plan found no configuration "
                                 f"that meets its SLOs, so there is nothing to deploy ({result.explanation or 'no plan'}"
                                 "); plan again with looser SLOs, a lower load or other systems")
        if req.engine is None:
            engine = result.engine
        elif result.engine != engine:
            raise ParameterError("engine", f"{engine}: the plan in {req.plan_file} was sized for "
                                 f"{result.engine}'s memory and batching; drop --engine to deploy it with "
                                 f"{result.engine}, or plan again with --engine {engine}")
    else:
        plan_fields = {k: v for k, v in req.model_dump(exclude_unset=True).items() if k in PlanRequest.model_fields}
        plan_req = PlanRequest(**{**plan_fields, "engine": engine, "no_disagg": True})   # aggregated files only
        result = plan(plan_req)
    row = result.recommended
    catalog = Catalog.load(req.catalog)
    if req.plan_file is not None and req.systems:
        wanted = {s.id for s in catalog.distinct_systems(req.systems)}
        rows = [r for r in result.per_system if r.system in wanted]
        if not rows:
            raise ParameterError("systems", f"the plan has no row for {', '.join(sorted(wanted))}")
        row = rows[0]
    if row is None:
        raise ClusterfitError("the plan has no configuration that meets the SLOs: nothing to deploy "
                              f"({result.explanation or 'no plan'})")
    for name in ("tp", "pp", "ep", "dp", "nodes_per_replica", "gpus_per_replica", "replicas"):
        if not 1 <= getattr(row, name) <= MAX_GPUS:   # a plan file edited by hand, or damaged
            raise ParameterError("plan_file", f"{req.plan_file}: {row.system}'s {name} is {getattr(row, name):,}, "
                                 f"outside 1..{MAX_GPUS:,}; plan again")
    if row.mode != "aggregated":
        what = f"the plan for {row.system} is disaggregated" + (f" ({row.xPyD})" if row.xPyD else "")
        why = f"{what}: clusterfit deploy writes aggregated replicas only; plan with --no-disagg"
        if req.plan_file is not None:
            raise ParameterError("plan_file", f"{req.plan_file}: mode: {why}")
        raise ClusterfitError(why)
    settings = result.engine_settings
    if settings is None:
        raise ClusterfitError("the plan has no engine_settings (made by an older clusterfit): plan again")
    # the model as the user named it (a saved plan holds its display name only)
    source = req.model if req.model is not None else result.model
    try:
        model = load_model(source)
    except ClusterfitError as exc:
        if req.model is not None:
            raise
        # the plan's model, not an argument given: the error names the file it came from
        raise ParameterError("plan_file", f"{req.plan_file}: model: {str(exc).rstrip('.')}; give the model as MODEL "
                             "(a Hugging Face id or a config.json)") from None
    if model.name != result.model:   # another name for the planned model (a local copy of a bundled one) is fine
        try:
            planned = load_model(result.model)
        except ClusterfitError:
            planned = None   # planned from a config.json this call does not see: the one given stands for it
        if planned is not None and (planned.total_params, planned.num_layers) != (model.total_params,
                                                                                   model.num_layers):
            raise ParameterError("model", f"{source}: the plan is for {result.model}, and {model.name} is another "
                                 f"model ({model.total_params / 1e9:.1f}B parameters against "
                                 f"{planned.total_params / 1e9:.1f}B)")
    model_id = _checkpoint_to_serve(model, source)
    if req.target == "kubernetes" and not model.checkpoint_id:   # served from a directory on this machine
        raise ParameterError("target", f"kubernetes: {model.name} is a local checkpoint ({model_id}), which the pods "
                             "cannot see (they download the model into their cache volume by its Hugging Face id); "
                             "give the model's Hugging Face id, or use --target shell or slurm on nodes that hold "
                             "the directory")
    system = catalog.system(row.system)
    _check_row_layout(row, system, req.plan_file)
    _check_deployable_precision(model, row.precision, row.system, req.plan_file)
    if row.kv_dtype == "fp32":   # the engines' KV caches are 16-bit ('auto') or fp8: vLLM vllm/config/cache.py
        # CacheDType has no float32, nor SGLang's --kv-cache-dtype choices (server_args.py)
        why = ("the engines keep KV in the model's 16-bit dtype ('auto') or fp8 (their --kv-cache-dtype choices; "
               "vLLM's CacheDType has no float32), not the fp32 cache the plan sized; plan with --kv-dtype bf16 or "
               "fp8")
        if req.plan_file is not None:
            raise ParameterError("plan_file", f"{req.plan_file}: {row.system}'s kv_dtype is 'fp32'; {why}")
        raise ParameterError("kv_dtypes", f"fp32: {why}")
    own = _checkpoint_formats(model)
    quant = "fp8" if row.precision == "fp8" and own != ["fp8"] else None   # an fp8 checkpoint is served as stored
    longest = result.longest_request   # None in a plan written before it was recorded
    need = math.ceil(longest.prompt_tokens + longest.output_tokens) if longest is not None else 1
    if req.max_model_len is not None:
        check_context(model, req.max_model_len, req.allow_longer_context, "max_model_len", "max_model_len")
        if longest is not None and req.max_model_len < longest.prompt_tokens + longest.output_tokens:
            raise ParameterError("max_model_len", f"{req.max_model_len:,} tokens is shorter than the planned request "
                                 f"({longest.describe()}): the engine would refuse it")
    elif need > (model.max_context or need):   # a saved plan of requests beyond the model's context
        check_context(model, need, req.allow_longer_context, f"the planned request ({longest.describe()})"
                      if longest is not None else "the planned request", "plan_file")
    summary = [f"model {model.hf_id or model.name}, {row.precision}, KV {row.kv_dtype}; engine {engine}",
               f"workload: {result.workload}", f"SLOs: {result.slo}",
               f"plan: {row.replicas} x {row.layout} on {row.system} ({row.nodes} node(s), {row.total_gpus} GPUs); "
               f"predicted at {row.requests_per_s:.3g} requests/s, at the SLOs' percentiles: "
               f"TTFT {row.ttft_s * 1e3:.0f} ms"
               + (f", TPOT {row.tpot_s * 1e3:.1f} ms" if row.tpot_s is not None else " (one output token: no TPOT)"),
               "cost: " + (f"${row.cost_per_hour:,.2f}/h ({row.price_source})" if row.cost_per_hour is not None
                           else "no catalog price")]
    drafts = result.speculative
    method = drafts.method if drafts is not None else None
    if method is not None:
        check_drafter(model, method)   # a saved plan may name a drafter the model cannot run
    if drafts is not None:
        summary.append(f"speculative decoding: {drafts.method}, {drafts.draft_tokens} draft tokens per step at "
                       f"acceptance {drafts.acceptance:.2f} ({drafts.tokens_per_step:.2f} tokens per step), as "
                       "the plan's TPOT assumes")
    # the settings describe the recommended row's engine (per attention-DP rank): a row of another system is rebuilt
    # from the same user settings
    described = result.recommended if result.recommended is not None else row
    row_catalog = dataclasses.replace(catalog, settings=_given_settings(settings, catalog.engine(engine),
                                                                        described.dp))
    fit_at = _row_memory(row_catalog, engine, model, row, method, req.plan_file)
    _check_row_memory(fit_at, need, req.plan_file)
    # the engine's max model length holds the longest planned request and fits one DP rank's KV cache (vLLM refuses
    # to start when one sequence of max_model_len tokens does not fit: v1/core/kv_cache_utils.py
    # check_enough_kv_cache_memory); the default is the model's context (at most 131,072), capped there
    max_len = req.max_model_len or max(need, min(model.max_context or 32768, 131072))
    holds = _longest_fitting(fit_at, need, max_len)
    if holds < max_len:
        if req.max_model_len is not None:
            raise ParameterError("max_model_len", f"{max_len:,} tokens: one sequence that long does not fit one "
                                 f"DP rank's KV cache ({row.layout} on {row.system}), which holds at most {holds:,} "
                                 f"tokens by clusterfit's memory figures; the engine would refuse to start (give at "
                                 f"most {holds:,})")
        max_len = holds
    eng = _row_engine(row_catalog, engine, model, row, speculative=method)
    spec = DeploySpec(
        model_id=model_id, served_name=model.name, engine=engine, tp=row.tp, pp=row.pp,
        ep=row.ep, dp=row.dp, nodes_per_replica=row.nodes_per_replica, gpus_per_replica=row.gpus_per_replica,
        gpus_per_node=system.gpus_per_node, replicas=row.replicas, max_model_len=int(max_len),
        memory_fraction=eng.gpu_memory_utilization, max_num_seqs=eng.max_num_seqs,
        max_num_batched_tokens=eng.max_num_batched_tokens, kv_dtype=row.kv_dtype, quantization=quant,
        enforce_eager=not eng.cuda_graphs, summary=summary, speculative_method=method,
        num_speculative_tokens=drafts.draft_tokens if drafts is not None else 0,
        draft_model=req.speculative_draft_model, model_context=model.max_context, system=system.id,
        vendor=system.gpu.vendor)
    files = render(spec, req.target)
    if req.out is not None:
        inputs = [p for p in [req.plan_file, req.scenario, *req.catalog] if p is not None]
        write(files, req.out, inputs)
    return DeployResult(out=None if req.out is None else str(req.out), engine=engine,
                        engine_version=ENGINE_VERSIONS[engine], target=req.target, plan=row,
                        files=[DeployFile(path=f.path, role=f.role, text=f.text) for f in files])


def _row_memory(catalog: Catalog, engine: str, model: ModelArch, row: Any, speculative: str | None,
                plan_file: Path | None) -> Callable[[int], ReplicaMemoryFit]:
    """The row's replica memory as plan sized it (memory.fit under the plan's engine settings), as a function of
    the context: ``fit_at(tokens).fits`` when each DP rank's KV cache holds one sequence of ``tokens``."""
    from .memory import fit as memory_fit

    system = catalog.system(row.system)
    precision = resolve_precision(model, None if row.precision == "checkpoint" else row.precision, None, row.kv_dtype)
    eng = catalog.engine(engine, system)
    if speculative is not None:
        eng = eng.for_speculative(row.dp, speculative)
    what = f"{model.name} at {precision.name} on {row.gpus_per_replica} x {system.gpu.id} ({row.layout})"
    layout = row.as_layout()

    def fit_at(tokens: int) -> ReplicaMemoryFit:
        try:
            mf = memory_fit(model, system, precision, layout, row.nodes_per_replica, eng, context=max(1, int(tokens)))
        except ClusterfitError as exc:
            raise _plan_row_error(plan_file, "layout", f"{what}: {exc}") from None
        return dataclasses.replace(mf, reason=f"{what} does not fit in memory: {mf.reason}")

    return fit_at


def _check_row_memory(fit_at: Callable[[int], ReplicaMemoryFit], tokens: int, plan_file: Path | None) -> None:
    """The row's model, precision and layout fit the system's memory (``_row_memory``): weights and reserve within
    the engine's budget and a KV cache that holds one request of ``tokens`` (the workload's longest, as far as
    known)."""
    mf = fit_at(tokens)
    if not mf.fits:
        raise _plan_row_error(plan_file, "layout", mf.reason)


def _longest_fitting(fit_at: Callable[[int], ReplicaMemoryFit], low: int, high: int) -> int:
    """The longest sequence, ``low``..``high`` tokens, whose KV one DP rank holds (``fit_at(low)`` fits); bisection,
    as memory.fit's KV per sequence grows with its length."""
    if fit_at(high).fits:
        return high
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fit_at(mid).fits else (low, mid)
    return low


def _plan_row_error(plan_file: Path | None, field: str, text: str) -> ClusterfitError:
    """A plan row that makes no sense: a ParameterError naming the plan file's field, or (a plan made by this call)
    a ClusterfitError."""
    if plan_file is not None:
        return ParameterError("plan_file", f"{plan_file}: {field}: {text}; plan again")
    return ClusterfitError(f"the plan's {field}: {text}")


def _check_row_layout(row: Any, system: System, plan_file: Path | None) -> None:
    """The row's layout is one replica: tp x pp x dp GPUs (attention DP ranks of tp GPUs, in pp stages) are its
    gpus_per_replica, on exactly the nodes of ``system`` that hold them (whole nodes when it spans several), and its
    ``layout`` label is the one tp / pp / ep / dp make (layout.Layout.label)."""
    lay = row.as_layout()
    gpn = system.gpus_per_node
    need = -(-lay.gpus // gpn)
    if lay.gpus != row.gpus_per_replica:
        raise _plan_row_error(plan_file, "gpus_per_replica", f"{row.system}'s tp {row.tp} x pp {row.pp} x dp "
                              f"{row.dp} is {lay.gpus:,} GPUs a replica, but gpus_per_replica is "
                              f"{row.gpus_per_replica:,}")
    if lay.gpus > gpn and lay.gpus % gpn:
        raise _plan_row_error(plan_file, "gpus_per_replica", f"a {lay.gpus:,}-GPU replica spans {system.id}'s "
                              f"{gpn}-GPU nodes without filling them (a multi-node replica takes whole nodes)")
    if row.nodes_per_replica != need:
        raise _plan_row_error(plan_file, "nodes_per_replica", f"{row.system}'s nodes_per_replica is "
                              f"{row.nodes_per_replica:,}, but a {lay.gpus:,}-GPU replica takes {need:,} node(s) of "
                              f"{gpn} GPUs")
    if row.layout != lay.label():
        raise _plan_row_error(plan_file, "layout", f"{row.system}'s layout {row.layout!r} is not the layout of its "
                              f"tp / pp / ep / dp ({lay.label()})")


def _checkpoint_formats(model: ModelArch) -> list[str]:
    """The weight formats the checkpoint stores its quantisable components in (one for most models: ['bf16'])."""
    from .precision import QUANTISABLE

    stored = resolve_precision(model, None, None, None).formats
    return sorted({stored[c].name for c in QUANTISABLE if model.params.get(c)})


def _check_deployable_precision(model: ModelArch, precision: str, system: str, plan_file: Path | None) -> None:
    """A plan row's precision the engines can serve from the model's checkpoint: ``checkpoint`` (its own weights, or
    their format's name) or ``fp8`` (quantized online by the engine, from 16-bit weights; an fp8 checkpoint is served
    as stored); else a ParameterError naming the plan file's precision field, or --precision when this call planned.
    A checkpoint stored in another format (MXFP4, INT4) has a quantization_config the engine serves it by: vLLM
    refuses a --quantization other than that one (vllm/config/model.py ModelConfig._verify_quantization, "does not
    match the quantization method specified in the `quantization` argument"), so fp8 is not offered for it."""
    from .precision import PRECISIONS, normalise

    own = _checkpoint_formats(model)
    online = set(own) <= {"bf16", "fp16"} or set(own) <= {"fp8", "fp8_block", "fp8_channel"}
    names = ["checkpoint", *(own if len(own) == 1 and own != ["fp8"] else []), *(["fp8"] if online else [])]
    if precision in names:
        return
    known = normalise(precision) in PRECISIONS   # a precision clusterfit sizes (else a damaged plan file)
    stored = f"{', '.join(names[:-1 if online else None])} (the checkpoint's own {' / '.join(own)} weights)"
    allowed = f"{stored} or fp8 (quantized online by the engine)" if online else stored
    if online or precision != "fp8":
        other = (f"; for {precision} weights deploy a checkpoint of the model stored in {precision} (clusterfit "
                 "quantizes online to fp8, from 16-bit weights, only)")
    else:
        other = (f": the checkpoint stores {' / '.join(f for f in own if f not in ('bf16', 'fp16'))} weights with "
                 "their quantization_config, and vLLM refuses a --quantization fp8 that differs from it; deploy a "
                 "16-bit or fp8 checkpoint of the model for fp8")
    if plan_file is not None:
        raise ParameterError("plan_file", f"{plan_file}: {system}'s precision is {precision!r}; deploy serves "
                             f"precision {allowed}" + (other if known else "; plan again"))
    raise ParameterError("precisions", f"{precision}: deploy serves {model.name} at precision {allowed}{other}")


def _given_settings(settings: ServingEngineSettings, engine: Engine, dp: int) -> EngineSettings:
    """The settings of a plan's ``engine_settings`` that the user gave (``settings.given``), as the user gave them.
    ``engine_settings`` hold the recommended replica's engine, whose ``max_num_batched_tokens`` is per attention-DP
    rank (``dp`` of them); SGLang's user setting is the replica's, divided among its ranks (Engine.for_layout), so
    it is multiplied back (Engine.batched_tokens_setting): passing the per-rank figure divided it a second time."""
    from .engines import EngineSettings

    values: dict[str, Any] = {
        "gpu_memory_utilization": settings.fraction, "max_num_seqs": settings.max_num_seqs,
        "max_num_batched_tokens": engine.batched_tokens_setting(settings.max_num_batched_tokens, dp),
        "enforce_eager": settings.enforce_eager,
        "async_scheduling": settings.async_scheduling}
    return EngineSettings(**{k: v for k, v in values.items() if k in settings.given})


def _row_engine(catalog: Catalog, engine: str, model: ModelArch, row: Any, speculative: str | None = None) -> Engine:
    """The engine a plan row runs, as the planner compiled it: the engine's defaults on the row's GPU, layout and
    KV pool (Engine.for_device, Engine.for_layout, SGLang's running-request cap from its pool) under the catalog's
    settings (the user's), which win; ``speculative``: the drafter's method under speculative decoding
    (Engine.for_speculative)."""
    from .compose import compile_replica

    system = catalog.system(row.system)
    precision = resolve_precision(model, None if row.precision == "checkpoint" else row.precision, None, row.kv_dtype)
    layout = row.as_layout()
    # the row's GPU's kernel curves, as the planner used them (a profile measured on another GPU does not apply)
    eng = catalog.engine(engine, system)
    return compile_replica(model, system, precision, layout,
                           eng.for_speculative(row.dp, speculative) if speculative is not None else eng,
                           curves=catalog.curves(system.gpu)).engine


# ============================================================================================ simulate
def simulate(request: SimulateRequest | None = None, /, **kwargs: Any) -> SimResult:
    """Replicas of the model behind a load balancer under traffic, failures and SLOs (the cluster simulator).

    The raw run (per-request arrays, for ``--csv`` / ``--plot``) is ``simulation_run(result)``."""
    from .sim.api import run_request

    req = _request(SimulateRequest, request, kwargs)
    if req.model is not None and req.isl is not None and req.osl is not None:
        check_context(load_model(req.model), req.isl + req.osl, req.allow_longer_context,
                      "the mean request (isl + osl)", "isl")
    report, run = run_request(req)
    result = SimResult.model_validate({**report, **_sim_intervals(req, report)})
    result._run = run
    return result


def _sim_intervals(req: SimulateRequest, report: dict[str, Any]) -> dict[str, Any]:
    """The ``*_interval`` keys of a simulation (clusterfit.intervals): each TTFT percentile in the prefill regime,
    or the queued one when the mean wait in the queue (Little's law: mean waiting requests / requests per second)
    is at least half the mean TTFT (intervals.ttft_regime); each TPOT percentile in the decode or throughput regime
    of the mean running batch per replica (Little's law: output tokens/s x mean TPOT / replicas); end-to-end
    latency with the TTFT and decode factors weighted by the mean TTFT's and the mean decode time's shares of the
    mean end-to-end latency. The intervals scale the simulated latencies by the residuals of their family:
    queueing that a slower step would add at high load is not re-simulated."""
    from .intervals import bands_for, decode_regime, ttft_regime

    engine = req.engine
    if engine is None and req.scenario is not None:
        from .planning.scenario import load_scenario

        engine = load_scenario(req.scenario).engine
    catalog = Catalog.load(req.catalog)
    bands = bands_for(catalog.engine(engine or "vllm").name, catalog.system(report["system"]).gpu.id,
                      load_model(report["model"]))
    ttft, tpot, e2e = report["ttft_s"], report["tpot_s"], report["e2e_s"]
    batch = report["throughput"]["output_tokens_per_s"] * (tpot["mean"] or 0.0) / max(report["replicas"], 1)
    dec = decode_regime(batch)
    served = report["throughput"]["requests_per_s"]
    wait_s = (report["queue"]["mean_waiting"] or 0.0) / served if served else 0.0
    pre = ttft_regime(wait_s, ttft["mean"] or 0.0)
    pre_lo, pre_hi = bands.band(pre).time_factors()
    dec_lo, dec_hi = bands.band(dec).time_factors()
    share = min(1.0, (ttft["mean"] or 0.0) / e2e["mean"]) if e2e["mean"] else 1.0
    e2e_f = (share * pre_lo + (1 - share) * dec_lo, share * pre_hi + (1 - share) * dec_hi)

    def scaled(pct: dict[str, float | None], f: tuple[float, float]) -> dict[str, Any]:
        return {k: None if v is None else {"value": v, "lo": v * f[0], "hi": v * f[1]} for k, v in pct.items()}

    return {"ttft_s_interval": scaled(ttft, (pre_lo, pre_hi)), "tpot_s_interval": scaled(tpot, (dec_lo, dec_hi)),
            "e2e_s_interval": scaled(e2e, e2e_f), "intervals": bands.basis([pre, dec])}


def simulation_run(result: SimResult) -> SimRun:
    """The raw simulation behind ``result`` (requests, windows, replicas), for writing CSVs and plots."""
    run: SimRun | None = getattr(result, "_run", None)
    if run is None:
        raise ClusterfitError("this SimResult carries no run (it was not produced by clusterfit.simulate)")
    return run


# =========================================================================================== calibrate
def calibrate(request: CalibrateRequest | None = None, /, log: Callable[[str], None] | None = None,
              **kwargs: Any) -> Profile:
    """Time the performance model's kernels on this machine's GPUs, fit the curves and write the profile to ``out``
    (``clusterfit calibrate``, clusterfit.calibrate.run). Needs the ``calibrate`` extra and a CUDA GPU
    (``device="cpu"``: a dry run for development, refused by ``profile=``). ``log`` gets a line per measured shape
    group."""
    from .calibrate.run import CalibrateRequest
    from .calibrate.run import calibrate as run

    req = _request(CalibrateRequest, request, kwargs)
    return run(req, log or (lambda _line: None))
