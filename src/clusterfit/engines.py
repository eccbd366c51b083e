"""Serving engines (vLLM, SGLang, TensorRT-LLM) as typed specs, from catalog/engines.yaml - the one place
engine facts live: how an engine budgets GPU memory (used by memory.py) and its time constants (used by perfmodel/).

Each engine has a handful of constants, the same for every model and GPU (optionally one override per GPU
family); they are fitted on the development CSV by ``python benchmarks/accuracy.py CSV --calibrate`` and the fit
result is written back to the YAML with the command that produced it:

- step_overhead_s: host-side time per engine iteration (scheduling, input preparation, sampling launch).
- seq_overhead_s: host-side time per running sequence of one attention-DP rank per iteration (its scheduling, stop
  checks, detokenisation and response bookkeeping), which grows the step at the large batches of small models; each
  rank's host handles its own sequences, so a replica pays seq_overhead_s x its running sequences / dp
  (StepModel.host_terms).
- attention_dp_seq_overhead_s: host-side time per running sequence of the whole replica per iteration under attention
  DP (dp > 1), on top of seq_overhead_s's per-rank share: TensorRT-LLM gathers every rank's responses to rank 0 each
  iteration (tensorrt_llm/_torch/pyexecutor/py_executor.py, PyExecutor._enqueue_responses: ``dist.tp_gather``
  when ``enable_attention_dp``), and rank 0 files them one by one while the other ranks wait for it at the next
  collective. Fitted on the development rows run under attention DP, globally and for each GPU family with 10 or
  more of them (benchmarks/accuracy.py --calibrate, ADP_PARAMS); 0 for vLLM and SGLang, whose DP ranks are separate
  engine cores / schedulers that return their own responses.
- kernel_overhead_s: time per kernel beyond its roofline inside a CUDA-graph step (launch gap, tail wave,
  the small kernels' minimum duration).
- compute_scale / memory_scale: multiply the H200-fitted compute / bandwidth efficiencies (the engine's
  kernels against torch's).
- attention_scale: multiplies the bandwidth efficiency of reads from the paged KV cache (decode attention, the DSA
  indexer's keys) on top of memory_scale: the engines read it through block tables (and dequantise fp8) where the
  H200 probe timed contiguous SDPA. Linear-attention state is a contiguous per-sequence buffer, read without it.
- max_num_seqs: the engine's cap on concurrently running sequences (vLLM / SGLang ``max_num_seqs`` /
  ``max_running_requests``, TensorRT-LLM ``max_batch_size``).
- max_num_batched_tokens: tokens per iteration (the prefill chunk budget; vLLM ``max_num_batched_tokens``, SGLang
  ``chunked_prefill_size``, TensorRT-LLM ``max_num_tokens``); also the token count the activation workspace is
  sized for (memory.py).
- gpu_memory_utilization: fraction of device memory the engine lets weights + KV use (vLLM
  ``gpu_memory_utilization``, SGLang ``mem_fraction_static``, TensorRT-LLM ``free_gpu_memory_fraction``, whose
  meaning ``memory_mode`` gives).
- batch_cap_rule: how the running-sequence cap is set when the user gives none: 'static' (max_num_seqs as is:
  vLLM), 'sglang_pool' (SGLang's max_running_requests default, from its KV pool: min(pool tokens // 2,
  req_to_token_pool size), the pool size being max(KV tokens / context length x 512, 2048) capped at 4096, per
  attention-DP rank; python/sglang/srt/managers/scheduler.py and model_executor/model_runner.py,
  ``Engine.for_kv_pool``) or 'trtllm_bench' (trtllm-bench's max-throughput heuristic,
  tensorrt_llm/bench/build/tuning.py calc_engine_setting + finetune_setting: its own KV estimate over the sequence
  length, capped at max_num_seqs and divided by pp, the runtime then running pp such micro-batches:
  ``max_num_seqs_per_microbatch``; StepModel.bench_max_batch).
- max_num_seqs_per_microbatch: whether ``max_num_seqs`` bounds each pipeline micro-batch rather than all the
  sequences in flight. TensorRT-LLM's PyTorch runtime keeps pp x max_batch_size requests active
  (tensorrt_llm/_torch/pyexecutor/model_engine.py, PyTorchModelEngine.get_max_num_sequences: "num_batches =
  self.mapping.pp_size; return num_batches * self.batch_size", which PyExecutor takes as max_num_active_requests),
  so under pipeline parallelism a replica runs up to pp x max_num_seqs sequences (per attention-DP rank);
  trtllm-bench divides its batch estimate by pp for that reason (tuning.py finetune_setting: "raw_bs =
  min(kv_cache_max_requests, 4096) / pp_size"). False: one cap for the whole pipeline (vLLM, SGLang).
- pp_hop_overhead_s / pp_hop_seq_overhead_s: under pipeline parallelism, the seconds each of the pp - 1 hops of
  the sampled tokens' way back to the first stage adds to an iteration: per hop, plus per sequence of one
  attention-DP rank's share of a micro-batch (each rank's host handles its own requests). TensorRT-LLM's PP executor loop (tensorrt_llm/_torch/pyexecutor/py_executor.py,
  _executor_loop_pp) samples on the last rank and passes the tokens along a host send / recv chain "(pp_size - 1)
  -> 0 -> 1 -> ... -> (pp_size - 2)", each rank receiving them once per pass of its loop, after it has scheduled
  and launched its own micro-batch; it runs without the overlap scheduler. Fitted on the development rows with
  pp > 1 (benchmarks/accuracy.py --calibrate, PP_PARAMS); 0 for vLLM and SGLang, whose PP rows are too few to
  fit them.
- moe_dp_comm: the collectives of a MoE layer under attention data parallelism (dp > 1 and ep > 1):
  'all_to_all' (token dispatch / combine to the experts' ranks: each rank sends its tokens' top-k copies; vLLM
  and SGLang's EP all-to-all) or 'allgather_reducescatter' (TensorRT-LLM's CUTLASS / TRITON MoE backends without
  the wide-EP all-to-all: every rank all-gathers all ranks' tokens before the MoE and reduce-scatters the bf16
  outputs after it; tensorrt_llm/_torch/modules/fused_moe, the ``use_dp`` path).
- expert_load_cv: relative spread of one EP rank's routed load from routing skew (perf.ops.ep_max_load_factor);
  the MoE layer waits for the most loaded rank.
- chunked_attention_context_only: chunked-attention layers (Llama-4) apply their chunk mask to context (prefill)
  tokens only; generation tokens attend, and the KV cache keeps, the whole context (TensorRT-LLM:
  docs/source/features/long-sequence.md, "chunked attention can only be applied to context requests"; it keeps
  every token's KV unless KvCacheConfig.max_attention_window is set, which trtllm-bench does not).
- kv_reservation: 'full' (reserves isl+osl per admitted request, TensorRT-LLM GUARANTEED_NO_EVICT) or
  'average' (pages allocated as generated: isl+osl/2 on average, vLLM / SGLang).
- vendors: the accelerator vendors the engine runs on; a system of another vendor is refused (``Catalog.engine``)
  and left out of a plan. TensorRT-LLM: NVIDIA only ("TensorRT LLM supports the full spectrum of NVIDIA GPU
  architectures", nvidia.github.io/TensorRT-LLM/supported-hardware.html). vLLM and SGLang: not restricted (both
  run on AMD ROCm; their other accelerator backends are not checked).
- moe_expert_min_cc: routed-expert weight formats the engine's MoE kernels run only from an NVIDIA compute
  capability up ({format: capability}); below it the engine refuses the model, and so does clusterfit
  (``experts_refused``: perf, fit and simulate name the engine; a plan leaves the system out, saying why).
  TensorRT-LLM, mxfp4 (gpt-oss's W4A16 MXFP4 experts) from 9.0: its PyTorch backend's WFP4A16 MoE method raises
  "WFP4A16 MoE is unsupported on SM{version}" on any GPU but SM90, and the Blackwell MoE backends run mxfp4 on SM100
  (tensorrt_llm/_torch/modules/fused_moe/quantization.py, WFP4A16FusedMoEMethod.create_weights; NVIDIA/TensorRT-LLM
  issue 6717 on an L4, SM89; GPUStack's gpt-oss-20b A100 page, TensorRT-LLM v1.2.0rc1 on SM80).
- moe_expert_unoptimised: routed-expert weight formats the engine runs below an NVIDIA compute capability through a
  path its own log calls unoptimised ({format: {below_cc: capability, measured: what was measured there, with its
  source}}); perf adds a note with that evidence (``unoptimised_experts``), the prediction stays the physics'.
  SGLang, mxfp4 below 9.0: its mxfp4 Marlin kernel "requires Hopper/SM90 or above"
  (python/sglang/srt/layers/quantization/mxfp4.py), so pre-Hopper GPUs run the triton_kernels MoE and SGLang logs
  "mxfp4 quantization is not fully optimized yet".
- batched_tokens_cover_seqs: the engine refuses to start with max_num_batched_tokens below max_num_seqs, so such
  settings are an error (``check_settings``). vLLM: vllm/config/scheduler.py, SchedulerConfig._verify_args
  ("max_num_batched_tokens (...) must be greater than or equal to max_num_seqs (...)").
- cuda_graphs: whether the engine replays each step as CUDA graphs (default True, as all three engines do for
  decode). False is vLLM's ``--enforce-eager`` (SGLang ``--disable-cuda-graph``, TensorRT-LLM without
  ``cuda_graph_config``): every kernel is then launched from the CPU, and the step model adds
  ``n_kernels x eager_launch_s`` to each step (perfmodel/step.py).
- graph_kernel_overhead_s: time per kernel inside a replayed CUDA graph (a decode-only step of at most
  ``cuda_graph_max_bs`` sequences per attention rank): the gap between graph nodes and the small kernels' minimum
  duration, without the CPU launch. Other steps (prefill and mixed chunks, larger decode batches, run piecewise
  or eagerly) pay ``kernel_overhead_s``. Fitted with the other constants; None in a YAML means the same as
  ``kernel_overhead_s`` (one per-kernel cost for every step).
- cuda_graph_max_bs: the largest decode batch (sequences per attention rank) the engine captures a CUDA graph for:
  vLLM ``max_cudagraph_capture_size`` = min(2 x max_num_seqs, 512) by default (vllm/config/vllm.py,
  _set_cudagraph_sizes); SGLang ``--cuda-graph-max-bs``, 256 at TP < 4 and 512 at TP >= 4 on 80-160 GB GPUs
  (python/sglang/srt/server_args.py, the GPU-memory defaults); TensorRT-LLM ``cuda_graph_config.max_batch_size``,
  128 when not given (tensorrt_llm.llmapi DecodeCudaGraphConfig docs, 1.3).
- cuda_graph_counts_tokens: whether ``cuda_graph_max_bs`` counts tokens rather than sequences, which matters under
  speculative decoding, where a verifying sequence brings k + 1 tokens (perfmodel StepModel.with_verify). vLLM's
  capture sizes are token counts (vllm/v1/cudagraph_dispatcher.py keys its decode graphs on
  uniform_decode_query_len = 1 + num_speculative_tokens tokens per request; its default largest size is
  min(max_num_seqs x uniform_decode_query_len x 2, 512) tokens): True. SGLang's ``--cuda-graph-max-bs`` counts
  sequences, each captured with speculative_num_draft_tokens tokens (cuda_graph_runner.py, num_tokens_per_bs), and
  TensorRT-LLM's ``cuda_graph_config.max_batch_size`` counts requests: False.
- async_scheduling: the host prepares step n+1 while the GPU runs step n, so a step costs max(GPU, host) rather
  than GPU + host. vLLM ``--async-scheduling`` (default on since vllm-project/vllm#27614, v0.12; off in v0.11 and
  earlier unless passed), SGLang's overlap scheduler (default on since v0.4, lmsys.org/blog/2024-12-04-sglang-v0-4
  "zero-overhead batch scheduler"; off with ``--disable-overlap-schedule``), TensorRT-LLM's overlap scheduler
  (default on, docs features/overlap-scheduler; off with ``disable_overlap_scheduler``).
- mixed_batches: whether one engine step carries prefill chunks and the running decodes together (vLLM V1's
  chunked-prefill scheduler and TensorRT-LLM's in-flight batching do; the simulator then fills the step's token
  budget with decode tokens first, sim/replica.py). SGLang does so only with ``--enable-mixed-chunk``
  (python/sglang/srt/server_args.py ``enable_mixed_chunk``, a store-true flag, off by default; it is in the 0.5.23
  flag list shared/reference/deploy/sglang-0.5.23-server-flags.txt): by default a step is a prefill batch whenever
  one can be formed, which holds every decode back, else a decode batch. perf's request cycle (perfmodel/serving.py
  cycle_s, running_batch) follows it: a prompt's chunk steps run alone and add their whole time to the decodes',
  and the prompts never crowd the decodes out of a step. Against the simulator at max throughput, Llama-3.1-8B on
  one H200 at 1000/128: perf +10.9% -> +4.6% output tokens/s, Qwen3-30B-A3B at 2000/500 +17.0% -> +9.7%. The
  first-token time and the planner's curve keep the mixed-step approximation, which the simulator prefers at the
  planner's light loads (benchmarks/plan_vs_sim.py, SGLang's question: TPOT p90 gap +2.3%; a scratch run with the
  planner's curve non-mixed planned 4 x TP2 instead of 7 x TP1 with a +4.5% gap, output not kept).
- async_scheduling_with_linear_attention: whether the engine keeps its async (overlap) scheduling for models with
  linear-attention or Mamba layers. SGLang does not by default: for such hybrid models its default prefix-cache
  strategy (MambaRadixCache ``no_buffer``) "will automatically close overlap schedule for compatibility reasons"
  (sgl-project/sglang docs/basic_usage/qwen3.md, "Mamba Radix Cache"; ``--mamba-radix-cache-strategy
  extra_buffer`` keeps it, at two extra Mamba states per request). ``for_linear_attention`` applies it once the
  model is known (perfmodel/step.py); a user's ``async_scheduling`` wins. True for vLLM and TensorRT-LLM.
- moe_fp4_efficiency_cap: the highest compute efficiency (a fraction, at most 1, of the grouped-GEMM curve's
  asymptote) that MoE expert GEMMs running in fp4 reach (Blackwell's block-scaled fp4 tensor cores). The curve
  (catalog/kernels) was fitted on bf16 grouped GEMMs on an H200 as a share of the bf16 dense peak: its ramp with the
  tokens per expert is the tile fill of the tensor cores' MMA tiles (128 rows on Hopper's wgmma and Blackwell's
  tcgen05 alike), which fp4 GEMMs share, so below the cap an fp4 expert GEMM follows the curve on the fp4 dense peak
  (4x the bf16 one on a B200: 9,000 against 2,250 TFLOP/s per GPU, catalog/hardware.yaml); at large token counts
  the block-scaled kernels reach a smaller share of that peak, the cap. An earlier form multiplied the whole curve
  by one factor, which charged decode-sized expert GEMMs (tens to hundreds of tokens per expert) the large-M
  shortfall: fitted on both, B200 decode-heavy rows of DeepSeek-R1, Llama-4-Maverick and Qwen3-235B came out
  13-24% too slow while prefill-heavy ones were 7-20% too fast (issue 11 names the mechanism: grouped fp4 GEMM
  efficiency on Blackwell). Fitted per GPU family with fp4 tensor cores on the TensorRT-LLM tables
  (benchmarks/accuracy.py --calibrate, FP4_FAMILY_PARAMS). vLLM and SGLang take the TensorRT-LLM values, rounded
  (written by the same --calibrate): on Blackwell they run the same FlashInfer TensorRT-LLM / CUTLASS fp4 MoE kernels
  (catalog/engines.yaml header); 1 on GPUs without fp4 tensor cores.
- sink_attention_prefill_scale: a multiplier (at most 1) on the prefill-attention efficiency of layers with attention
  sinks (gpt-oss, MiMo-V2-Flash, DeepSeek-V4; attention.Attention.sinks) on NVIDIA GPUs before Hopper (compute
  capability < 9.0), where the FlashAttention kernels the efficiency curve stands for cannot run them
  (``sink_prefill_scale``). vLLM then serves them with its Triton backend: "GPT-OSS works on Ampere devices by
  default, using the TRITON_ATTN attention backend and Marlin MXFP4 MoE" (vllm-project/recipes OpenAI/GPT-OSS.md,
  "A100"), whose prefill is slower than FlashAttention's (vllm-project/vllm#18152: an 8k-token prompt on an A100
  40GB took 1,500 ms against 600 ms with the earlier kernel; #20308 then skipped the masked tiles). Fitted for vLLM on
  its A100 gpt-oss pages (benchmarks/fit_oss_engines.py, catalog/engines.yaml); 1 for TensorRT-LLM (no such rows)
  and SGLang (its A100 gpt-oss rows run 6-19x below any of its constants, a path the model does not have).
- mamba_full_memory_ratio: for models with linear-attention / Mamba layers (a recurrent state per sequence),
  the ratio at which the engine splits the memory left after the weights between a pool of recurrent states and
  the KV pool of the full-attention layers. SGLang ``--mamba-full-memory-ratio`` (default 0.9; in the 0.5.23 flag
  list): state memory = rest x r / (1 + r), ``max_mamba_cache_size`` = that memory // one request's state, the KV
  pool gets the rest (python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py, handle_max_mamba_cache), and
  the running requests are capped at max_mamba_cache_size // ``mamba_states_per_running_request`` (init_memory).
  None: one pool that holds both (vLLM's hybrid KV cache manager allocates the states as pages of the same pool),
  no cap but the pool's. ``split_state_pool`` applies it (perfmodel/step.py compile_step).
- speculative_max_num_seqs / speculative_async_scheduling: the running-request cap (replica-wide, split evenly over
  the attention-DP ranks) and the overlap scheduling the engine falls back to when speculative decoding is on and
  the user sets neither (``for_speculative``). SGLang: EAGLE / EAGLE3 / STANDALONE (NEXTN is run as EAGLE) reset
  ``max_running_requests`` to 48 and disable the overlap scheduler (python/sglang/srt/server_args.py,
  ServerArgs._handle_speculative_decoding: "Max running requests is reset to 48 for speculative decoding", "Overlap
  scheduler is disabled because of using eagle speculative decoding"); its scheduler gives each attention-DP rank
  max_running_requests // dp_size. None: no change (vLLM keeps its defaults).
- speculative_sync_methods: the drafters (speculative.METHODS) under which the engine turns its async scheduling off
  unless the user sets it (``for_speculative``). vLLM enables async scheduling by default only for the EAGLE family
  and MTP (vllm-project/vllm#31998, "Enable async scheduling by default with spec decoding": "It will still be
  disabled implicitly for non-EAGLE/MTP types"; first in v0.14.0, deepjavalibrary/djl#3833), and logs "Async
  scheduling not supported with ngram-based speculative decoding and will be disabled" for CPU n-gram lookup (the
  auto-decision in vllm/config/vllm.py): ("ngram",).
- mamba_states_per_running_request: states the pool keeps per running request (SGLang
  MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO = 3, the radix cache's copies, with the default ``no_buffer``
  strategy; same file); used with ``mamba_full_memory_ratio`` only.
- num_scheduler_steps: decode steps the engine runs per scheduler call. vLLM V0's ``--num-scheduler-steps``
  (multi-step scheduling, vllm-project/vllm#7000, v0.6.0; default 1; gone in V1, whose scheduler runs every step):
  the scheduler is called once per group of N decode steps, so a request that arrives during a group waits for the
  group to end before its prefill is scheduled (the RFC, vllm-project/vllm#6854: "new prefill requests will only
  start at every 8 steps"), and its tokens stream in bursts of N. The simulator cuts a decode segment for an
  arrival at the end of the group (counted from the segment's start), not at the next step. 1 for every engine by
  default; the harness sets it from a row's engine string (the vLLM v0.6.0 rows of the SGLang team's benchmark page).
- gpu_memory_defaults: serving settings an engine derives from the device's memory and the layout, applied by
  ``for_layout`` once the layout is known (the user's settings win): SGLang's ServerArgs._handle_gpu_memory_settings
  (python/sglang/srt/server_args.py; the same heuristic in the 0.5 releases and on main) sets
  ``chunked_prefill_size`` and ``cuda_graph_max_bs`` by the GPU's memory in MiB and its ``--tp-size`` (TP x
  attention DP here; ``tiers``: rows of [below MiB or None, chunked_prefill_size, cuda_graph_max_bs at
  --tp-size < 4, at >= 4]), then
  ``mem_fraction_static`` = round((memory - reserved) / memory, 3) with reserved = 512 + 1.5 x
  max(chunked_prefill_size, 2048) + 2 x cuda_graph_max_bs + 1024 x tp_size x PP / 8 MiB, plus 3 x
  cuda_graph_max_bs x DP (and 1.5 x cuda_graph_max_bs x DP more above 300) under attention DP, at least 10 GiB
  (10,240 MiB) on GPUs above 60 GiB
  (``sglang_mem_fraction_static``). Under attention DP SGLang divides ``chunked_prefill_size`` among the DP ranks
  (ServerArgs._handle_data_parallelism); ``max_num_batched_tokens`` here is per rank, so it becomes the quotient.
  None: no such defaults (vLLM, TensorRT-LLM).
- small_device: the serving settings an engine defaults to on smaller devices, applied by ``for_device`` before
  the user's settings: {below_memory_gib, names, max_num_seqs, max_num_batched_tokens}. vLLM's OpenAI server
  uses max_num_seqs 1024 / max_num_batched_tokens 8192 on devices with at least 70 GiB that are not A100s, and
  256 / 2048 elsewhere (vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults: "Setting large
  max_num_batched_tokens for A100 reduces throughput, see PR #17885"). None: one default for every device.
- request_latency_s: seconds each request spends outside the engine's steps on its way to the first token and
  out with its last one: the HTTP server, tokenisation and the hand-over to the engine process (vLLM's API server
  -> EngineCore over ZMQ, SGLang's tokenizer manager -> scheduler -> detokenizer processes) and the streaming of
  the tokens back. It adds to TTFT and end-to-end latency (perf, the planner's TTFT, the simulator's per-request
  times), not to the GPU's steps or throughput. Fitted with the other constants (benchmarks/fit_oss_engines.py);
  0 for TensorRT-LLM, whose development rows are mostly offline trtllm-bench runs.
- eager_launch_s: CPU time to launch one kernel without CUDA graphs, 3 us, paid in series with the GPU work, on top
  of ``kernel_overhead_s`` in place of ``graph_kernel_overhead_s``. Measured on one H200 (tests/data/measured,
  benchmarks/probe_decode_steps.py; tests/test_measured_h200.py): over the measured eager / CUDA-graph step ratios of
  three dense shapes (Llama-3.1-8B at contexts 1,024 and 8,192, Qwen3-32B; batch 2 and up) this additive law fits
  best at 3 us, and with one shape left out in turn it predicts the held-out shape's ratios better (mean |error|
  0.122) than a step lasting the longer of the GPU's work and the CPU's launches, refitted the same way (0.131). It
  was 5 us, where the law fitted best while a replayed kernel cost 5 us (graph_kernel_overhead_s, bounded at 3.5 us
  since 2026-12-05): a kernel run eagerly costs the same 9.5-10 us more than one in a graph either way. Meta's
  Holistic Trace Analysis documents 5-20 us of "launch time on the CPU side" for PyTorch kernels
  (facebookresearch/HolisticTraceAnalysis, docs/source/features/cuda_kernel_launch_stats.rst); part of it overlaps the
  GPU work the earlier launches queued.

Memory budgeting (memory.py):
- memory_mode: 'total_fraction' (vLLM gpu_memory_utilization, SGLang mem_fraction_static: the engine may use
  gpu_memory_utilization x device memory) or 'free_fraction' (TensorRT-LLM KvCacheConfig.free_gpu_memory_fraction: the
  KV cache gets that fraction of the memory still free after weights and runtime).
- activations_in_fraction: whether activations count inside the fraction (vLLM) or live in the headroom (SGLang).
- reserves_sampler_logits: whether the engine's memory profiling run samples ``max_num_seqs`` rows of fp32 logits,
  so that much is kept out of the KV cache (vLLM's profile_run ends with a dummy sampler run over max_num_seqs
  requests). TensorRT-LLM's PyTorch backend sizes its KV cache after a profiling forward of dummy context requests of
  ``max_num_tokens`` tokens in all, each asking for one output token (tensorrt_llm/_torch/pyexecutor/_util.py,
  KvCacheCreator._create_dummy_context_requests: requests of min(max_num_tokens, max_seq_len) tokens), so only their
  last-token rows are sampled: a handful (8 at 1,024-token sequences, 4 MB per GPU of a 128k vocabulary at TP1), none
  reserved here.
- cuda_graph_bytes / nccl_bytes: per-GPU estimates of CUDA-graph and communicator buffers (not measured here).
- memory_source: where the budgeting defaults come from.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import yaml

from .errors import ClusterfitError, ParameterError, unknown

if TYPE_CHECKING:
    from .hardware import Gpu

ENGINES_YAML = Path(__file__).resolve().parent / "catalog" / "engines.yaml"
ALIASES = {"trt-llm": "trtllm", "tensorrt-llm": "trtllm", "tensorrt_llm": "trtllm", "trt": "trtllm"}


#: Accepted values of the enumerated fields (checked when the YAML is loaded).
KV_RESERVATIONS = ("full", "average")
MEMORY_MODES = ("total_fraction", "free_fraction")
BATCH_CAP_RULES = ("static", "sglang_pool", "trtllm_bench")
MOE_DP_COMMS = ("all_to_all", "allgather_reducescatter")
#: Ranges of the settings a user may override (Engine.with_settings; schema.py validates the same ranges).
GPU_MEMORY_UTILIZATION_RANGE = (0.05, 1.0)
MAX_NUM_BATCHED_TOKENS_RANGE = (1, 1_048_576)
MAX_NUM_SEQS_RANGE = (1, 1_048_576)
#: vLLM V0's --num-scheduler-steps (decode steps per scheduler call; 1 = every step, the V1 behaviour)
NUM_SCHEDULER_STEPS_RANGE = (1, 1024)
#: CPU launch time of one kernel without CUDA graphs (Engine.eager_launch_s; see the module docstring).
EAGER_LAUNCH_S = 3e-6


@dataclass(frozen=True)
class EngineSettings:
    """The serving settings a user passes to an engine, with the engines' own names (None: the engine's default).

    - max_num_seqs: running sequences per engine instance, i.e. per attention-DP rank (vLLM ``max_num_seqs``,
      SGLang ``max_running_requests``, TensorRT-LLM ``max_batch_size``).
    - max_num_batched_tokens: tokens per step, the prefill chunk budget (vLLM ``max_num_batched_tokens``, SGLang
      ``chunked_prefill_size``, TensorRT-LLM ``max_num_tokens``).
    - gpu_memory_utilization: vLLM ``gpu_memory_utilization`` and SGLang ``mem_fraction_static`` (a fraction of the
      device's memory for weights + KV), TensorRT-LLM ``free_gpu_memory_fraction`` (a fraction of the memory
      left free after weights and runtime, for KV); ``Engine.memory_mode`` says which.
    - enforce_eager: vLLM ``--enforce-eager`` (no CUDA graphs; ``Engine.cuda_graphs`` False).
    - async_scheduling: vLLM ``--async-scheduling`` / ``--no-async-scheduling`` (SGLang: False is
      ``--disable-overlap-schedule``; TensorRT-LLM: ``disable_overlap_scheduler``); ``Engine.async_scheduling``.
    """

    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    enforce_eager: bool | None = None
    async_scheduling: bool | None = None

    FIELDS: ClassVar[tuple[str, ...]] = ("max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization",
                                         "enforce_eager", "async_scheduling")

    def given(self) -> list[str]:
        """The names of the settings that are set (not None), in field order."""
        return [k for k in self.FIELDS if getattr(self, k) is not None]

    def over(self, base: EngineSettings | None) -> EngineSettings:
        """These settings, with ``base``'s where these give none (a request's options over a scenario's)."""
        if base is None:
            return self
        return EngineSettings(*(getattr(self, k) if getattr(self, k) is not None else getattr(base, k)
                                for k in self.FIELDS))

    def apply(self, engine: Engine) -> Engine:
        """``engine`` with these settings (Engine.with_settings)."""
        return engine.with_settings(self.gpu_memory_utilization, self.max_num_batched_tokens, self.max_num_seqs,
                                    cuda_graphs=None if self.enforce_eager is None else not self.enforce_eager,
                                    async_scheduling=self.async_scheduling)


@dataclass(frozen=True)
class Engine:
    """One serving engine's constants (see the module docstring for each field and its source)."""

    name: str
    step_overhead_s: float
    kernel_overhead_s: float
    compute_scale: float
    memory_scale: float
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    kv_reservation: str = "average"
    expert_load_cv: float = 0.0
    seq_overhead_s: float = 0.0
    attention_dp_seq_overhead_s: float = 0.0
    attention_scale: float = 1.0
    chunked_attention_context_only: bool = False
    memory_mode: str = "total_fraction"
    activations_in_fraction: bool = True
    reserves_sampler_logits: bool = True
    cuda_graph_bytes: int = 1 << 30
    nccl_bytes: int = 512 << 20
    memory_source: str = ""
    batch_cap_rule: str = "static"
    moe_dp_comm: str = "all_to_all"
    cuda_graphs: bool = True
    eager_launch_s: float = EAGER_LAUNCH_S
    graph_kernel_overhead_s: float | None = None
    cuda_graph_max_bs: int = 512
    cuda_graph_counts_tokens: bool = False
    async_scheduling: bool = False
    mixed_batches: bool = True
    num_scheduler_steps: int = 1
    async_scheduling_with_linear_attention: bool = True
    moe_fp4_efficiency_cap: float = 1.0
    sink_attention_prefill_scale: float = 1.0
    request_latency_s: float = 0.0
    max_num_seqs_per_microbatch: bool = False
    pp_hop_overhead_s: float = 0.0
    pp_hop_seq_overhead_s: float = 0.0
    mamba_full_memory_ratio: float | None = None
    mamba_states_per_running_request: int = 3
    speculative_max_num_seqs: int | None = None
    speculative_async_scheduling: bool | None = None
    speculative_sync_methods: tuple[str, ...] = ()
    #: the checkpoint's MTP (NextN) layers are loaded as the drafter (speculative decoding with method mtp): their
    #: weights then take GPU memory (memory.fit, weight_bytes_per_gpu include_mtp); set by for_speculative, never in engines.yaml
    loads_mtp_layers: bool = False
    #: the drafter under speculative decoding (speculative.METHODS), set by for_speculative: its attention layers
    #: keep KV in the target's cache (memory.draft_kv_layers), never in engines.yaml
    draft_method: str | None = None
    #: the EAGLE / EAGLE-3 draft head the user described (speculative.DraftHead; compose.Catalog.draft_head): its
    #: weights and KV under eagle / eagle3 (memory.drafter_weight_bytes_per_gpu); None: not described
    draft_head: Any = None
    #: the accelerator vendors the engine runs on (hardware.GPU.vendor); empty: any in the catalog
    vendors: tuple[str, ...] = ()
    #: routed-expert weight format -> the NVIDIA compute capability the engine's MoE kernels need (experts_refused)
    moe_expert_min_cc: dict[str, float] = field(default_factory=dict, compare=False, hash=False)
    #: routed-expert weight format -> {below_cc, measured}: where the engine runs it unoptimised (unoptimised_experts)
    moe_expert_unoptimised: dict[str, dict[str, Any]] = field(default_factory=dict, compare=False, hash=False)
    #: the engine refuses max_num_batched_tokens below max_num_seqs (check_settings)
    batched_tokens_cover_seqs: bool = False
    small_device: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    gpu_memory_defaults: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    #: the serving settings the user gave (with_settings): ``for_layout`` keeps them
    user_set: frozenset[str] = field(default=frozenset(), compare=False, hash=False)
    #: (device MiB, tp, pp, dp) ``for_layout`` resolved this engine for, and the engine before it; None before
    layout_resolved: tuple[tuple[float, int, int, int], "Engine"] | None = field(default=None, compare=False,
                                                                              hash=False, repr=False)
    by_gpu_family: dict[str, dict[str, Any]] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        for fname, allowed in (("kv_reservation", KV_RESERVATIONS), ("memory_mode", MEMORY_MODES),
                               ("batch_cap_rule", BATCH_CAP_RULES), ("moe_dp_comm", MOE_DP_COMMS)):
            value = getattr(self, fname)
            if value not in allowed:
                raise ClusterfitError(f"engine {self.name}: {fname} must be one of {', '.join(allowed)}, got {value!r}")
        for fname in ("request_latency_s", "pp_hop_overhead_s", "pp_hop_seq_overhead_s",
                      "attention_dp_seq_overhead_s"):
            if not 0.0 <= getattr(self, fname) <= 1.0:
                raise ClusterfitError(f"engine {self.name}: {fname} must be in 0..1 s, got {getattr(self, fname)!r}")
        for fname in ("moe_fp4_efficiency_cap", "sink_attention_prefill_scale"):
            if not 0.0 < getattr(self, fname) <= 1.0:
                raise ClusterfitError(f"engine {self.name}: {fname} must be in (0, 1], got {getattr(self, fname)!r}")
        if self.mamba_full_memory_ratio is not None and not 0.0 < self.mamba_full_memory_ratio <= 100.0:
            raise ClusterfitError(f"engine {self.name}: mamba_full_memory_ratio must be in (0, 100], got "
                                  f"{self.mamba_full_memory_ratio!r}")
        if int(self.mamba_states_per_running_request) != self.mamba_states_per_running_request or \
                self.mamba_states_per_running_request < 1:
            raise ClusterfitError(f"engine {self.name}: mamba_states_per_running_request must be an integer >= 1, "
                                  f"got {self.mamba_states_per_running_request!r}")
        lo, hi = NUM_SCHEDULER_STEPS_RANGE
        if int(self.num_scheduler_steps) != self.num_scheduler_steps or not lo <= self.num_scheduler_steps <= hi:
            raise ClusterfitError(f"engine {self.name}: num_scheduler_steps (--num-scheduler-steps) must be an "
                                  f"integer in {lo}..{hi}, got {self.num_scheduler_steps!r}")

    @property
    def graph_kernel_s(self) -> float:
        """Per-kernel time inside a replayed CUDA graph (``graph_kernel_overhead_s``, else ``kernel_overhead_s``)."""
        return self.kernel_overhead_s if self.graph_kernel_overhead_s is None else self.graph_kernel_overhead_s

    def with_settings(self, gpu_memory_utilization: float | None = None, max_num_batched_tokens: int | None = None,
                      max_num_seqs: int | None = None, cuda_graphs: bool | None = None,
                      async_scheduling: bool | None = None, num_scheduler_steps: int | None = None,
                      cuda_graph_max_bs: int | None = None) -> "Engine":
        """This engine with the user's overrides of its serving settings (None: keep the catalog value).

        Raises ClusterfitError naming the setting when a value is out of range: gpu_memory_utilization in
        0.05..1.0, max_num_batched_tokens and max_num_seqs in 1..1,048,576, num_scheduler_steps in 1..1,024,
        cuda_graph_max_bs (SGLang --cuda-graph-max-bs, vLLM --max-cudagraph-capture-size) in 1..1,048,576.
        """
        changes: dict[str, Any] = {}
        if gpu_memory_utilization is not None:
            lo, hi = GPU_MEMORY_UTILIZATION_RANGE
            if not lo <= gpu_memory_utilization <= hi:
                raise ClusterfitError(f"gpu_memory_utilization (--gpu-memory-utilization) must be in {lo}..{hi}, "
                                      f"got {gpu_memory_utilization}")
            changes["gpu_memory_utilization"] = float(gpu_memory_utilization)
        for fname, value, (lo_i, hi_i) in (
                ("max_num_batched_tokens", max_num_batched_tokens, MAX_NUM_BATCHED_TOKENS_RANGE),
                ("max_num_seqs", max_num_seqs, MAX_NUM_SEQS_RANGE),
                ("num_scheduler_steps", num_scheduler_steps, NUM_SCHEDULER_STEPS_RANGE),
                ("cuda_graph_max_bs", cuda_graph_max_bs, MAX_NUM_SEQS_RANGE)):
            if value is None:
                continue
            if int(value) != value or not lo_i <= value <= hi_i:
                raise ClusterfitError(f"{fname} (--{fname.replace('_', '-')}) must be an integer in "
                                      f"{lo_i}..{hi_i:,}, got {value}")
            changes[fname] = int(value)
        if cuda_graphs is not None:
            changes["cuda_graphs"] = bool(cuda_graphs)
        if async_scheduling is not None:
            changes["async_scheduling"] = bool(async_scheduling)
        return self._changed(changes, by_user=True)

    def with_draft_head(self, head: Any) -> "Engine":
        """This engine with the user's EAGLE draft head (speculative.DraftHead), counted under eagle / eagle3."""
        return self._changed({"draft_head": head}, by_user=False)

    def _changed(self, changes: dict[str, Any], by_user: bool) -> "Engine":
        """This engine with ``changes`` (recorded in ``user_set`` when the user gave them). The changes go on the
        engine before ``for_layout``, which resolves the layout's defaults again around them."""
        if not changes:
            return self
        base = self.layout_resolved[1] if self.layout_resolved is not None else self
        return replace(base, **changes, user_set=base.user_set | set(changes) if by_user else base.user_set)

    def for_speculative(self, dp: int = 1, method: str | None = None) -> "Engine":
        """This engine as it runs with speculative decoding on ``dp`` attention-DP ranks: ``speculative_max_num_seqs``
        // dp running sequences per rank (a static cap) and ``speculative_async_scheduling`` (async scheduling off
        under a drafter of ``speculative_sync_methods``), each unless the user set it; with ``method`` mtp the
        checkpoint's MTP layers loaded (``loads_mtp_layers``); ``draft_method`` records the drafter, whose attention
        layers share the KV cache (memory.draft_kv_layers). Returns the engine before ``for_layout`` when it changes
        (to be resolved again, as with_settings)."""
        changes: dict[str, Any] = {"loads_mtp_layers": True} if method == "mtp" else {}
        if method is not None:
            changes["draft_method"] = method
        if self.speculative_max_num_seqs is not None and "max_num_seqs" not in self.user_set:
            changes.update(max_num_seqs=max(1, int(self.speculative_max_num_seqs) // max(1, int(dp))),
                           batch_cap_rule="static")
        if "async_scheduling" not in self.user_set:
            if self.speculative_async_scheduling is not None:
                changes["async_scheduling"] = bool(self.speculative_async_scheduling)
            if method in self.speculative_sync_methods:
                changes["async_scheduling"] = False
        return self._changed(changes, by_user=False)

    def for_layout(self, gpu: Any, tp: int, pp: int = 1, dp: int = 1) -> "Engine":
        """The engine's defaults that follow from the device's memory and the layout (``gpu_memory_defaults``; a
        ``hardware.Gpu``), keeping the settings the user gave. An engine already resolved for this device and
        layout is returned as is; one resolved for another is resolved again from the engine before it."""
        rule = self.gpu_memory_defaults
        if not rule:
            return self
        mib = float(gpu.usable_memory_bytes) / 2**20
        key = (mib, int(tp), int(pp), int(dp))
        if self.layout_resolved is not None:
            done, base = self.layout_resolved
            return self if done == key else base.for_layout(gpu, tp, pp, dp)
        _below, chunk, graphs_small_tp, graphs_large_tp = next(
            row for row in rule["tiers"] if row[0] is None or mib < float(row[0]))
        tp_size = int(tp) * int(dp)  # SGLang's --tp-size spans the attention-DP ranks (--dp-size divides it)
        graphs = int(graphs_small_tp if tp_size < 4 else graphs_large_tp)
        if "cuda_graph_max_bs" in self.user_set:  # SGLang --cuda-graph-max-bs given: its reserve follows it too
            graphs = int(self.cuda_graph_max_bs)
        if "max_num_batched_tokens" in self.user_set:
            chunk = self.max_num_batched_tokens
        fraction = (self.gpu_memory_utilization if "gpu_memory_utilization" in self.user_set
                    else sglang_mem_fraction_static(mib, int(chunk), graphs, tp_size, pp, dp))
        per_rank = max(1, int(chunk) // dp)
        return replace(self, max_num_batched_tokens=per_rank, cuda_graph_max_bs=graphs,
                       gpu_memory_utilization=fraction, layout_resolved=(key, self))

    def batched_tokens_setting(self, per_rank: int, dp: int = 1) -> int:
        """The ``max_num_batched_tokens`` to give ``with_settings`` so that ``for_layout`` at ``dp`` attention-DP
        ranks runs ``per_rank`` tokens per step on each rank: the inverse of for_layout's division (an engine with
        ``gpu_memory_defaults``, SGLang, takes the user's chunked_prefill_size for the whole replica and divides it
        among the ranks); other engines take it per rank as it is. A plan's ``engine_settings`` hold the per-rank
        value, so a deployment rebuilding the plan's engine from them passes this."""
        return int(per_rank) * max(1, int(dp)) if self.gpu_memory_defaults else int(per_rank)

    def for_linear_attention(self, has_recurrent_state: bool) -> "Engine":
        """The engine's scheduling for a model with linear-attention / Mamba layers (a recurrent state per sequence):
        without ``async_scheduling_with_linear_attention`` it runs such models synchronously, unless the user set
        ``async_scheduling``; other models, or engines that keep overlapping: this engine."""
        if has_recurrent_state and not self.async_scheduling_with_linear_attention and "async_scheduling" not in \
                self.user_set:
            return replace(self, async_scheduling=False)
        return self

    def for_kv_pool(self, kv_tokens_per_rank: float, context_len: int | None,
                    state_slots: int | None = None) -> "Engine":
        """The running-sequence cap that follows from the KV pool (``batch_cap_rule`` 'sglang_pool':
        ``sglang_max_running_requests``), unless the user set ``max_num_seqs``; other rules: this engine.
        ``state_slots``: the recurrent states a separate state pool holds per rank (``split_state_pool``); the cap
        is then at most state_slots // ``mamba_states_per_running_request``, the user's cap included."""
        eng = self
        if self.batch_cap_rule == "sglang_pool" and "max_num_seqs" not in self.user_set:
            eng = replace(self, max_num_seqs=sglang_max_running_requests(kv_tokens_per_rank, context_len))
        if state_slots is not None:
            cap = max(1, self.state_pool_running_cap(state_slots))
            if cap < eng.max_num_seqs:
                eng = replace(eng, max_num_seqs=cap)
        return eng

    def split_state_pool(self, budget_bytes: float, state_bytes_per_seq: float) -> tuple[float, int | None]:
        """(KV pool bytes, recurrent states held) of one GPU whose engine memory after the weights is
        ``budget_bytes`` (a negative budget counts as none), for a model holding ``state_bytes_per_seq`` of
        recurrent state per sequence on it: with ``mamba_full_memory_ratio`` r the states get
        floor(budget x r / (1 + r) / state) slots and the KV pool the rest (SGLang handle_max_mamba_cache); without
        it, or for a model without such state, one pool (the whole budget, None)."""
        budget = max(0.0, float(budget_bytes))
        r = self.mamba_full_memory_ratio
        if r is None or state_bytes_per_seq <= 0.0:
            return budget, None
        slots = int(budget * r / (1.0 + r) // state_bytes_per_seq)
        return budget - slots * state_bytes_per_seq, slots

    def caps_in_flight(self, pp: int) -> int:
        """How many groups of ``max_num_seqs`` sequences one attention-DP rank runs at once over ``pp`` pipeline
        stages: pp where the cap bounds each micro-batch (``max_num_seqs_per_microbatch``), else 1."""
        return int(pp) if self.max_num_seqs_per_microbatch else 1

    def state_pool_running_cap(self, state_slots: int) -> int:
        """Requests a state pool of ``state_slots`` states runs at once: slots // mamba_states_per_running_request
        (SGLang init_memory; 0 when the pool cannot hold one request's states)."""
        return int(state_slots) // int(self.mamba_states_per_running_request)

    def for_device(self, gpu: Any) -> "Engine":
        """The engine's default serving settings on this GPU (``small_device``; a ``hardware.Gpu``): call before
        the user's settings are applied, so that theirs win."""
        sd = self.small_device
        if not sd:
            return self
        memory_gib = float(gpu.visible_memory_bytes or gpu.memory_bytes) / 2**30
        name = f"{gpu.id} {gpu.name}".lower()
        if memory_gib >= float(sd["below_memory_gib"]) and not any(n in name for n in sd.get("names", ())):
            return self
        return replace(self, max_num_seqs=int(sd["max_num_seqs"]),
                       max_num_batched_tokens=int(sd["max_num_batched_tokens"]))

    def runs_on(self, gpu: Any) -> bool:
        """Whether the engine runs on ``gpu`` (a hardware.GPU) at all: its vendor is one of ``vendors``."""
        return not self.vendors or getattr(gpu, "vendor", "nvidia") in self.vendors

    def not_on(self, system: Any) -> str:
        """Why the engine cannot serve on ``system`` (a hardware.System) it does not run on."""
        return (f"{self.name} runs on {' / '.join(v.upper() for v in self.vendors)} GPUs only, not on {system.id}'s "
                f"{system.gpu.name}")

    def experts_refused(self, experts: str | None, gpu: Any) -> str | None:
        """Why the engine cannot run routed experts in weight format ``experts`` (None: a dense model) on ``gpu`` (a
        hardware.Gpu): its MoE kernels for that format need a later compute capability (``moe_expert_min_cc``)."""
        need = self.moe_expert_min_cc.get(experts or "")
        if not _below_cc(gpu, need):
            return None
        return (f"{self.name} has no MoE kernel for {experts} experts on {gpu.id} (compute capability "
                f"{gpu.compute_capability:.1f}; it needs {need:.1f} or later): serve this model with another engine, "
                "or on a later GPU")

    def check_experts(self, experts: str | None, gpu: Any) -> None:
        """Refuse routed experts the engine has no MoE kernel for on ``gpu`` (``experts_refused``)."""
        why = self.experts_refused(experts, gpu)
        if why is not None:
            raise ParameterError("engine", why)

    def unoptimised_experts(self, experts: str | None, gpu: Any) -> str | None:
        """What was measured where the engine runs routed experts in format ``experts`` on ``gpu`` through a path it
        calls unoptimised (``moe_expert_unoptimised``); None where it does not."""
        entry = self.moe_expert_unoptimised.get(experts or "", {})
        return str(entry["measured"]) if _below_cc(gpu, entry.get("below_cc")) else None

    def check_settings(self) -> None:
        """Refuse settings the engine itself refuses at start-up (``batched_tokens_cover_seqs``)."""
        if self.batched_tokens_cover_seqs and self.max_num_batched_tokens < self.max_num_seqs:
            raise ParameterError("max_num_batched_tokens", f"{self.name} refuses fewer tokens per step "
                                 f"({self.max_num_batched_tokens:,}) than max_num_seqs ({self.max_num_seqs:,} here); "
                                 "raise it or lower --max-num-seqs")

    def check_runs_on(self, system: Any) -> None:
        """Refuse ``system`` (a hardware.System) when the engine does not run on its accelerators."""
        if not self.runs_on(system.gpu):
            raise ParameterError("engine", self.not_on(system))

    def for_gpu(self, gpu_id: str) -> "Engine":
        """The constants with the GPU family's override applied (``gpu_family``; an override may also be keyed
        by a substring of the GPU id, the first match wins)."""
        fam = gpu_family(gpu_id)
        if fam in self.by_gpu_family:
            return self._with_constants(self.by_gpu_family[fam])
        gid = gpu_id.lower()
        for key, over in self.by_gpu_family.items():
            if key in gid:
                return self._with_constants(over)
        return self

    def _with_constants(self, over: dict[str, Any]) -> "Engine":
        """This engine with the constants ``over``; itself when it holds them already (Catalog.engine applies the
        family's constants and compile_step applies them again: no new Engine, re-validated, per compiled layout)."""
        missing = object()
        if all(type(getattr(self, k, missing)) is type(v) and getattr(self, k) == v for k, v in over.items()):
            return self
        return replace(self, **over)

    def sink_prefill_scale(self, gpu: "Gpu") -> float:
        """The prefill-attention efficiency multiplier of layers with attention sinks on ``gpu``:
        ``sink_attention_prefill_scale`` on an NVIDIA GPU before Hopper (compute capability < 9.0), 1 elsewhere
        (FlashAttention-3 and the Blackwell kernels run sinks; other vendors' GPUs have no capability)."""
        return self.sink_attention_prefill_scale if _below_cc(gpu, 9.0) else 1.0


def _below_cc(gpu: Any, threshold: float | None) -> bool:
    """Whether ``gpu`` (a hardware.Gpu) states an NVIDIA compute capability below ``threshold`` (None: no threshold;
    a GPU without one, another vendor's, is never below)."""
    cc = getattr(gpu, "compute_capability", None)
    return threshold is not None and cc is not None and cc < threshold


def sglang_mem_fraction_static(memory_mib: float, chunked_prefill_size: int, cuda_graph_max_bs: int, tp_size: int,
                               pp: int = 1, dp: int = 1) -> float:
    """SGLang's default ``mem_fraction_static`` (python/sglang/srt/server_args.py,
    ServerArgs._handle_gpu_memory_settings): the share of the device's memory left once ``reserved`` MiB are kept
    for activations, CUDA graphs and runtime, rounded to 3 decimals (see ``Engine.gpu_memory_defaults``).
    ``tp_size``: SGLang's ``--tp-size`` (all GPUs of a pipeline stage, attention-DP ranks included); ``dp``: its
    ``--dp-size`` under attention DP."""
    reserved = 512.0 + max(chunked_prefill_size, 2048) * 1.5 + cuda_graph_max_bs * 2.0 + tp_size * pp / 8 * 1024
    if dp > 1:  # attention data parallelism
        reserved += cuda_graph_max_bs * dp * 3.0
        if cuda_graph_max_bs > 300:
            reserved += cuda_graph_max_bs * dp * 1.5
    if memory_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024.0)
    return round((memory_mib - reserved) / memory_mib, 3)


def sglang_max_running_requests(kv_tokens: float, context_len: int | None) -> int:
    """SGLang's default ``max_running_requests`` of one attention-DP rank holding ``kv_tokens`` KV token slots
    (``Engine.batch_cap_rule`` 'sglang_pool'): the smaller of half the pool's tokens (scheduler.py) and the request
    pool, max(int(kv_tokens / context_len x 512), 2048) capped at 4096 (model_runner.py); 2048 for a model whose
    context length is unknown."""
    pool = 2048 if not context_len else min(max(int(kv_tokens / context_len * 512), 2048), 4096)
    return max(1, min(int(kv_tokens) // 2, pool))


def front_end_s(step_model: Any) -> float:
    """The front-end latency of the engine a step model runs (Engine.request_latency_s), 0 for step models without
    an engine (the simulator's and planner's test doubles)."""
    return float(getattr(getattr(step_model, "engine", None), "request_latency_s", 0.0) or 0.0)


def schedules_ahead(step_model: Any) -> bool:
    """Whether the engine a step model runs chooses step n+1's requests when it launches step n, so that a request
    arriving while the replica is busy joins the step after the one already chosen: async (overlap) scheduling.
    vLLM's async scheduling schedules the next step before the current one's outputs come back
    (vllm/v1/engine/core.py step_with_batch_queue); SGLang's overlap scheduler forms and launches the next batch
    while the GPU runs the current one (lmsys.org/blog/2024-12-04-sglang-v0-4). Not under multi-step scheduling,
    whose groups already hold arrivals back to their end (num_scheduler_steps). The simulator admits by this rule
    (sim/replica.py Replica._admit); perf and the planner add the step to TTFT (perfmodel/serving.py,
    planning/capacity.py). TensorRT-LLM is modelled synchronously (catalog/engines.yaml), so not here."""
    eng = getattr(step_model, "engine", None)
    return bool(getattr(eng, "async_scheduling", False)) and int(getattr(eng, "num_scheduler_steps", 1) or 1) == 1


def mixed_batches(step_model: Any) -> bool:
    """Whether the engine a step model runs carries prefill chunks and the running decodes in one step
    (Engine.mixed_batches: SGLang's steps do not without --enable-mixed-chunk, a prefill step then holds every decode
    back), True for step models without an engine (the simulator's and planner's test doubles). The simulator
    (sim/replica.py) and the planner (planning/capacity.py aggregated_curve) both read it here."""
    return bool(getattr(getattr(step_model, "engine", None), "mixed_batches", True))


#: GPU families that get their own fitted constants (everything else, i.e. Hopper, uses the global ones). A family
#: is a GPU and the system it comes in, since the constants cover both the GPU's kernels and the host that runs
#: the engine's per-sequence and per-kernel work:
#: - blackwell: B200 / B300 in x86 HGX/DGX nodes (same SM, fp4 tensor cores, HBM3e);
#: - grace_blackwell: GB200 / GB300, the same Blackwell GPU with a higher power limit (1,200 W against 1,000 W)
#:   and an Arm Grace host instead of x86 (the engine's host work runs on a different CPU);
#: - a100 (SXM4, NVLink) and a100_pcie (300 W PCIe card, all-reduce over PCIe): different clocks and links;
#: - l40s and rtx_pro (GDDR PCIe cards, no NVLink).
#: Keyed by the hardware catalog ids' chip names, matched as substrings after dropping '-' and '_'; the first
#: match wins, so "gb200" comes before "b200" and "a100_pcie" before "a100".
GPU_FAMILIES = (("rtx_pro", "rtx_pro"), ("rtxpro", "rtx_pro"), ("gb200", "grace_blackwell"),
                ("gb300", "grace_blackwell"), ("b200", "blackwell"), ("b300", "blackwell"),
                ("a100_pcie", "a100_pcie"), ("a100pcie", "a100_pcie"), ("a100", "a100"), ("l40s", "l40s"))


def gpu_family(gpu_id: str) -> str | None:
    """The family whose constants a GPU uses (None: the default, Hopper-fitted constants)."""
    gid = gpu_id.lower().replace("-", "_").replace(" ", "_")
    for key, fam in GPU_FAMILIES:
        if key in gid or key in gid.replace("_", ""):
            return fam
    return None


@lru_cache(maxsize=4)
def load_engines(path: str | None = None) -> dict[str, Engine]:
    """Every engine of catalog/engines.yaml (or of the YAML at ``path``), by name."""
    data = yaml.load(Path(path or ENGINES_YAML).read_text(encoding="utf-8"),
                     Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml when present
    out: dict[str, Engine] = {}
    for name, v in data["engines"].items():
        v = dict(v)
        v.pop("notes", None)
        for key in ("vendors", "speculative_sync_methods"):
            if key in v:
                v[key] = tuple(v[key])
        out[name] = Engine(name=name, **v)
    return out


def get_engine(name: str, path: str | None = None) -> Engine:
    """An engine by name (vllm, sglang, trtllm; aliases tensorrt-llm, trt-llm); unknown names list close matches."""
    engines = load_engines(path)
    key = ALIASES.get(str(name).lower(), str(name).lower())
    if key not in engines:
        raise unknown("engine", name, engines)
    return engines[key]
