"""Load-balancer policies: which live replica gets the next request.

Every policy sees the same state the cluster keeps current at event times: ``load[r]`` (outstanding
requests on replica r; ``inf`` for a replica that is down or draining) and the replicas themselves
(for KV usage, as of each replica's last step or segment boundary: a replica in a long decode
segment reports the KV it held when the segment began). Random choices come from the simulation's
seeded generator. ``affinity`` hashes the request's prefix key (its session) onto a ring of live
replicas (64 virtual nodes each), so a lost replica only moves its own sessions; requests without a
key go to the least outstanding replica.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Sequence

import numpy as np

from .config import check_policy
from .replica import Replica


class Balancer:
    """Routes requests to replicas by ``policy`` (one of :data:`~clusterfit.sim.config.POLICIES`)."""

    def __init__(self, policy: str, rng: np.random.Generator, virtual_nodes: int = 64) -> None:
        check_policy(policy)
        self.policy = policy
        self.rng = rng
        self._rr = 0
        self._rand: list[float] = []
        self._virtual_nodes = virtual_nodes
        self._ring_keys: list[int] = []
        self._ring_owner: list[int] = []
        self._ring_cache: dict[int, int] = {}

    def _uniform(self) -> float:
        if not self._rand:
            self._rand = self.rng.random(4096).tolist()
        return self._rand.pop()

    def rebuild(self, replicas: Sequence[Replica]) -> None:
        """Recompute the consistent-hash ring after replicas come or go."""
        pts = []
        for rep in replicas:
            if rep.alive and rep.accepting:
                for v in range(self._virtual_nodes):
                    pts.append((_hash(f"replica-{rep.index}-{v}"), rep.index))
        pts.sort()
        self._ring_keys = [p[0] for p in pts]
        self._ring_owner = [p[1] for p in pts]
        self._ring_cache = {}

    def choose(self, key: int, load: list[float], replicas: Sequence[Replica]) -> int:
        """Index of the replica for a request with prefix key ``key``; -1 if none is accepting."""
        policy = self.policy
        n = len(load)
        if policy == "least_outstanding" or (policy == "affinity" and key < 0):
            r = load.index(min(load))  # the first least loaded (as min(range(n), key=load.__getitem__))
        elif policy == "round_robin":
            for _ in range(n):
                r = self._rr % n
                self._rr += 1
                if load[r] != math.inf:
                    break
        elif policy == "random":
            live = [i for i in range(n) if load[i] != math.inf]
            if not live:
                return -1
            r = live[int(self._uniform() * len(live))]
        elif policy == "power_of_two":
            live = [i for i in range(n) if load[i] != math.inf]
            if not live:
                return -1
            a = live[int(self._uniform() * len(live))]
            b = live[int(self._uniform() * len(live))]
            r = a if load[a] <= load[b] else b
        elif policy == "least_kv":
            best, r = math.inf, -1
            for i in range(n):
                if load[i] == math.inf:
                    continue
                rep = replicas[i]
                u = rep.kv_used / rep.cap + 1e-6 * load[i]
                if u < best:
                    best, r = u, i
        else:  # affinity, key >= 0
            r = self._ring_cache.get(key, -1)
            if r < 0 or load[r] == math.inf:
                if not self._ring_keys:
                    return -1
                h = _hash(f"key-{key}")
                j = bisect.bisect_right(self._ring_keys, h) % len(self._ring_keys)
                r = self._ring_owner[j]
                self._ring_cache[key] = r
        return r if load[r] != math.inf else -1


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
