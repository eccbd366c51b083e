"""Performance model: kernel efficiency curves, per-op FLOPs/bytes, collectives, engine steps, serving metrics.

Public API:
    compile_step(model, system, layout, precision, engine="vllm") -> StepModel   (vectorised step times)
    predict(model, system, layout, precision, engine, isl, osl, concurrency=None, batch=None, context=None,
            max_throughput=False) -> dict
"""

from .serving import predict
from .step import StepModel, compile_step

__all__ = ["compile_step", "predict", "StepModel"]
