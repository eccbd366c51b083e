"""Per-request bookkeeping shared by the replicas and the cluster (plain lists: the hot loop indexes
them millions of times, and list indexing is several times faster than numpy scalar indexing)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .requests import Requests

PENDING, COMPLETED, REJECTED, FAILED = 0, 1, 2, 3


class Ledger:
    """What happened to every request.

    first_token_s / finish_s: times of the first output token and of the last, seconds (nan if none).
    status: PENDING, COMPLETED, REJECTED or FAILED. replica: the replica that served it last (-1).
    retries: times it was re-sent after losing its replica. preemptions: times it was preempted.
    generated: output tokens produced before a preemption (recomputed on readmission), tokens.
    reservation_bytes: the KV bytes each request reserves at its first admission,
        ``kv_rule.kv_reservation_bytes(input_tokens, output_tokens)`` evaluated once over all requests
        (empty without a ``kv_rule``; see sim.replica).
    """

    def __init__(self, requests: Requests, kv_rule: Any = None) -> None:
        n = len(requests)
        self.n = n
        self.arrival_s: list[float] = requests.arrival_s.tolist()
        self.input_tokens: list[int] = requests.input_tokens.tolist()
        self.output_tokens: list[int] = requests.output_tokens.tolist()
        self.prefix_key: list[int] = requests.prefix_key.tolist()
        self.shared_tokens: list[int] = requests.shared_tokens.tolist()
        # prompt tokens served from a cache warm on every replica (empty: none; see Requests.cached_tokens)
        self.cached_tokens: list[int] = [] if requests.cached_tokens is None else requests.cached_tokens.tolist()
        self.first_token_s: list[float] = [math.nan] * n
        self.finish_s: list[float] = [math.nan] * n
        self.status: list[int] = [PENDING] * n
        self.replica: list[int] = [-1] * n
        self.retries: list[int] = [0] * n
        self.preemptions: list[int] = [0] * n
        self.generated: list[int] = [0] * n
        self.reservation_bytes: list[float] = []
        if kv_rule is not None:
            # one vectorised call instead of one per admission (elementwise float64: the same values)
            res = np.asarray(kv_rule.kv_reservation_bytes(requests.input_tokens, requests.output_tokens), float)
            self.reservation_bytes = np.broadcast_to(res, (n,)).tolist()

    def arrays(self) -> dict[str, np.ndarray]:
        """The ledger as numpy arrays, keyed by field name."""
        return {
            "arrival_s": np.asarray(self.arrival_s, float),
            "input_tokens": np.asarray(self.input_tokens, np.int64),
            "output_tokens": np.asarray(self.output_tokens, np.int64),
            "prefix_key": np.asarray(self.prefix_key, np.int64),
            "first_token_s": np.asarray(self.first_token_s, float),
            "finish_s": np.asarray(self.finish_s, float),
            "status": np.asarray(self.status, np.int8),
            "replica": np.asarray(self.replica, np.int32),
            "retries": np.asarray(self.retries, np.int32),
            "preemptions": np.asarray(self.preemptions, np.int32),
        }
