"""Engine settings implied by the engine version a published row states (the benchmark harness's reading of it).

clusterfit models the pinned engine versions (vLLM 0.33, SGLang 0.5.23, TensorRT-LLM 1.x), whose defaults live in
``clusterfit/catalog/engines.yaml``. Published rows come from older releases whose defaults differed in one way that
moves the step time: whether the host's scheduling work overlaps the GPU's (``EngineSettings.async_scheduling``).
Each rule below is a documented default change, never a fitted per-row factor:

- vLLM: async scheduling became the default with vllm-project/vllm#27614 ("[Core] Enable async scheduling by
  default", October 2025), so releases up to v0.11.0 run synchronously unless the row passes
  ``--async-scheduling``; ``--num-scheduler-steps N`` (V0 multi-step scheduling, v0.6) runs N decode steps per
  scheduler call, which hides the host work the same way and is read as async scheduling. With speculative
  decoding the default came later, with vllm-project/vllm#31998 ("Enable async scheduling by default with spec
  decoding", first in v0.14.0: deepjavalibrary/djl#3833), and never for CPU n-gram drafting ("disabled implicitly
  for non-EAGLE/MTP types"): such rows run synchronously unless they pass ``--async-scheduling``.
- SGLang: the overlap ("zero-overhead") batch scheduler is on by default since v0.4
  (lmsys.org/blog/2024-12-04-sglang-v0-4); v0.3 and earlier, or ``--disable-overlap-schedule``, run without it.
  From v0.4 the row states nothing (None): the engine's default, which SGLang itself turns off for hybrid
  linear-attention models (clusterfit.engines, async_scheduling_with_linear_attention).
- TensorRT-LLM: the overlap scheduler is on by default in the PyTorch backend (docs features/overlap-scheduler);
  ``disable_overlap_scheduler: true`` turns it off.
"""

from __future__ import annotations

import re

_VERSION = re.compile(r"\bv?(\d+)\.(\d+)(?:\.(\d+))?")


def _version(text: str) -> tuple[int, int, int] | None:
    m = _VERSION.search(text)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None


def async_scheduling_of(engine: str, engine_text: str, notes: str = "") -> bool | None:
    """Whether the run overlapped host scheduling with the GPU, from the row's engine text and notes (None: the
    row does not say, use the pinned version's default). ``engine`` is clusterfit's engine name."""
    text = f"{engine_text} {notes}"
    low = text.lower()
    if engine == "vllm":
        if "--async-scheduling" in low or re.search(r"--num-scheduler-steps[\s=]+([2-9]|\d\d+)", low):
            return True
        if "--no-async-scheduling" in low:
            return False
        v = _version(engine_text)
        if "speculative" in low and ("ngram" in low or (v is not None and v < (0, 14, 0))):
            return False
        return None if v is None else v > (0, 11, 0)
    if engine == "sglang":
        if "--disable-overlap-schedule" in low:
            return False
        v = _version(engine_text)
        # from v0.4 the default: None, so the engine's own rules apply (it stops overlapping for hybrid
        # linear-attention models, Engine.async_scheduling_with_linear_attention)
        return False if v is not None and v < (0, 4, 0) else None
    if engine == "trtllm":
        return False if re.search(r"disable_overlap_scheduler\s*[:=]\s*true", low) else None
    return None
