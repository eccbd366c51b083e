"""Weight and KV-cache formats: bytes per element including scale overhead.

A weight format's ``bits_per_param`` counts the payload and its scales, spread over the elements they scale:
  - bf16 / fp16: 16 bits.
  - fp8 (per-tensor scale): 8 bits (one fp32 scale per tensor: negligible, counted as 0).
  - fp8_channel: 8 + 32/K bits (one fp32 scale per output channel of K inputs; K = the model's hidden size).
  - fp8_block (DeepSeek-style 128x128 blocks, fp32 scales): 8 + 32/16384 bits.
  - int8 (per-channel fp32 scales, W8A8): 8 + 32/K bits.
  - int4_gG (group-quantised, one bf16 scale per G weights, symmetric): 4 + 16/G bits (int4 = int4_g128).
  - mxfp4 (OCP MX: 32-element blocks, one 8-bit e8m0 scale): 4 + 8/32 = 4.25 bits.
  - mxfp8 (OCP MX, the same 32-element blocks and e8m0 scale over fp8 e4m3 elements; OCP Microscaling Formats (MX)
    Specification v1.0, MXFP8): 8 + 8/32 = 8.25 bits, fp8 math.
  - nvfp4 (16-element blocks, one fp8 e4m3 scale, + one fp32 per tensor): 4 + 8/16 = 4.5 bits.
``compute_dtype`` names the tensor-core math the GEMM runs in (it picks the GPU's dense peak): int4 weights are
dequantised into bf16 GEMMs (W4A16); mxfp4/nvfp4 run fp4 math where the GPU has it (Blackwell), else the
GPU's next wider dtype (see hardware.Gpu.peak_flops).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .arch import COMPONENTS, ModelArch
from .errors import ClusterfitError, ParameterError, unknown


@dataclass(frozen=True)
class WeightFormat:
    """A weight storage format. bits_per_param includes scale overhead (bits per weight element)."""

    name: str
    bits_per_param: float
    compute_dtype: str

    @property
    def bytes_per_param(self) -> float:
        return self.bits_per_param / 8.0


#: Precision names a user may type, and the checkpoint format names arch.py produces.
PRECISIONS = ("bf16", "fp16", "fp8", "fp8_block", "fp8_channel", "int8", "int4", "int4_g32", "int4_g128",
              "mxfp4", "mxfp8", "nvfp4")

KV_DTYPES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp32": 4.0}


def normalise(name: str) -> str:
    """'FP8-block' -> 'fp8_block', 'bfloat16' -> 'bf16', 'fp4' -> 'nvfp4', 'w4a16' -> 'int4'."""
    s = str(name).strip().lower().replace("-", "_")
    return {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "fp4": "nvfp4", "w4a16": "int4",
            "w8a8": "int8", "float8": "fp8", "e4m3": "fp8", "float32": "fp32"}.get(s, s)


def weight_format(name: str, hidden: int = 4096) -> WeightFormat:
    """The WeightFormat for a name (see module docstring); ``hidden`` sizes per-channel scale overhead."""
    n = normalise(name)
    if n in ("bf16", "fp16"):
        return WeightFormat(n, 16.0, n)
    if n == "fp32":
        return WeightFormat(n, 32.0, "bf16")
    if n == "fp8":
        return WeightFormat(n, 8.0, "fp8")
    if n == "fp8_block":
        return WeightFormat(n, 8.0 + 32.0 / (128 * 128), "fp8")
    if n == "fp8_channel":
        return WeightFormat(n, 8.0 + 32.0 / max(hidden, 1), "fp8")
    if n == "int8":
        return WeightFormat(n, 8.0 + 32.0 / max(hidden, 1), "int8")
    m = re.fullmatch(r"int4(?:_g(\d+))?", n)
    if m:
        g = int(m.group(1) or 128)
        if g <= 0:
            raise ClusterfitError(f"int4 group size must be positive, got {g}")
        return WeightFormat(f"int4_g{g}", 4.0 + 16.0 / g, "bf16")
    if n == "mxfp4":
        return WeightFormat(n, 4.0 + 8.0 / 32, "fp4")
    if n == "mxfp8":
        return WeightFormat(n, 8.0 + 8.0 / 32, "fp8")
    if n == "nvfp4":
        return WeightFormat(n, 4.0 + 8.0 / 16, "fp4")
    raise unknown("precision", name, PRECISIONS)


def kv_bytes_per_elem(kv_dtype: str) -> float:
    """Bytes per cached K/V element for a KV-cache dtype (bf16/fp16 2, fp8 1)."""
    n = normalise(kv_dtype)
    if n not in KV_DTYPES:
        raise unknown("KV-cache dtype", kv_dtype, KV_DTYPES)
    return KV_DTYPES[n]


@dataclass(frozen=True)
class Precision:
    """Weight format per component (arch.COMPONENTS) and the KV-cache dtype."""

    name: str
    formats: dict[str, WeightFormat]
    kv_dtype: str
    kv_bytes_per_elem: float

    def bytes_for(self, component: str, n_params: float) -> float:
        """Bytes to store ``n_params`` weights of a component."""
        return n_params * self.formats[component].bytes_per_param


#: Components a global ``--precision`` changes. Embeddings, norms and routers stay in 16 bits (as vLLM,
#: SGLang and TensorRT-LLM quantise them) and the LM head stays 16-bit unless the checkpoint quantised it.
QUANTISABLE = ("attention", "linear_attention", "indexer", "dense_mlp", "shared_experts", "routed_experts", "mtp")


def experts_format(model: ModelArch, precision: Precision) -> str | None:
    """The weight format of ``model``'s routed experts under ``precision`` (e.g. 'mxfp4'); None for a dense model."""
    return precision.formats["routed_experts"].name if model.params.get("routed_experts") else None


def resolve_precision(model: ModelArch, precision: str | None = None, experts_precision: str | None = None,
                      kv_dtype: str | None = None) -> Precision:
    """Weight formats per component: the checkpoint's own (``precision=None``), or ``precision`` applied to the
    quantisable components, with ``experts_precision`` overriding the routed experts. KV dtype defaults to the
    16-bit activation dtype; ``--kv-dtype fp8`` halves the cache."""
    hidden = model.hidden or 4096
    fmts = {c: weight_format(model.quantization.get(c, "bf16"), hidden) for c in COMPONENTS}
    label = "checkpoint"
    if precision is not None and normalise(precision) != "checkpoint":
        wf = weight_format(precision, hidden)
        for c in QUANTISABLE:
            fmts[c] = wf
        label = wf.name
        if wf.bits_per_param >= 16:  # a 16-bit request also de-quantises the head and embeddings
            for c in COMPONENTS:
                fmts[c] = wf
    if experts_precision is not None and not model.params.get("routed_experts"):
        raise ParameterError("experts_precision", f"{model.name} has no routed experts (a dense model); leave "
                             "the experts' precision out")
    if experts_precision is not None:
        try:
            fmts["routed_experts"] = weight_format(experts_precision, hidden)
        except ClusterfitError as exc:
            exc.parameter = "experts_precision"   # the same names, another field
            raise
        label += f"+experts:{fmts['routed_experts'].name}"
    act = "fp16" if model.torch_dtype in ("float16", "fp16") else "bf16"
    kv = normalise(kv_dtype) if kv_dtype else act
    return Precision(label, fmts, kv, kv_bytes_per_elem(kv_dtype or act))  # the error quotes what was typed


def naive_bytes_per_param(precision: str) -> float:
    """The back-of-envelope figure: 2 bytes for 16-bit, 1 for 8-bit, 0.5 for 4-bit, no scales."""
    n = normalise(precision)
    if n in ("bf16", "fp16"):
        return 2.0
    if n.startswith("fp8") or n in ("int8", "mxfp8"):
        return 1.0
    if n.startswith("int4") or n in ("mxfp4", "nvfp4"):
        return 0.5
    if n == "fp32":
        return 4.0
    raise unknown("precision", precision, PRECISIONS)
