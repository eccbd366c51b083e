"""Small step models shared by the simulator tests (no tests here; anything with sim.stepmodel.StepCosts works)."""

from __future__ import annotations

import numpy as np


class ConstantStep:
    """Every step takes ``step_s`` seconds, whatever it carries (for queueing checks)."""

    def __init__(self, step_s: float, kv_capacity_tokens: int = 10**7, max_num_seqs: int = 1, gpus: int = 1):
        self.c = step_s
        self.kv_capacity_tokens = kv_capacity_tokens
        self.max_num_seqs = max_num_seqs
        self.gpus = gpus

    def step_s(self, prefill_tokens, prefill_attended, decode_seqs, decode_attended):
        shape = np.broadcast(np.asarray(prefill_tokens), np.asarray(prefill_attended), np.asarray(decode_seqs),
                             np.asarray(decode_attended)).shape
        return np.full(shape, self.c)

    def decode_step_s(self, batch, context):
        return self.step_s(0, 0, batch, np.asarray(batch) * np.asarray(context))

    def prefill_s(self, tokens, cached=0):
        return self.step_s(tokens, 0, 0, 0)

    def with_verify(self, draft_tokens):
        """Speculative decoding (sim.stepmodel.StepCosts): a step costs the same whatever it verifies."""
        return self


class RooflineStep:
    """A small roofline: 16 GB of weights at 4 TB/s, 16 GFLOP per token at 500 TFLOP/s, attention
    linear in keys attended, 1 ms overhead. Small KV so that tests reach preemption."""

    def __init__(self, kv_capacity_tokens: int = 200_000, max_num_seqs: int = 64, gpus: int = 1,
                 verify_tokens: float = 0.0):
        self.kv_capacity_tokens = kv_capacity_tokens
        self.max_num_seqs = max_num_seqs
        self.gpus = gpus
        self.verify_tokens = verify_tokens

    def with_verify(self, draft_tokens):
        """Speculative decoding (sim.stepmodel.StepCosts): each decoding sequence's drafts go through the GEMMs as
        tokens; its KV is read once (StepModel.with_verify's law)."""
        return RooflineStep(self.kv_capacity_tokens, self.max_num_seqs, self.gpus, float(draft_tokens))

    def step_s(self, prefill_tokens, prefill_attended, decode_seqs, decode_attended):
        p, pa, d, da = (np.asarray(x, float) for x in (prefill_tokens, prefill_attended, decode_seqs,
                                                        decode_attended))
        gemm = np.maximum(16e9 / 4e12, 16e9 * (p + d * (1.0 + self.verify_tokens)) / 5e14)
        return gemm + pa * 5e-10 + da * 3e-8 + 1e-3

    def decode_step_s(self, batch, context):
        b = np.asarray(batch, float)
        return self.step_s(0, 0, b, b * np.asarray(context, float))

    def prefill_s(self, tokens, cached=0):
        t = np.asarray(tokens, float)
        return self.step_s(t, t * cached + t * (t + 1) / 2, 0, 0)
