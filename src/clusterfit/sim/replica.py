"""One serving replica: an engine's scheduler at iteration level.

Continuous batching with chunked prefill under ``max_num_batched_tokens`` per step (prefill chunks riding with the
decodes, or, for an engine without ``mixed_batches`` such as SGLang, prefill steps that hold the decodes back, except
for a disaggregated decode pool's KV hand-offs, ``kv_handoff``), paged
KV with admission control, preemption by recompute when KV runs out, a per-replica LRU prefix cache and optional
speculative decoding. Step times come from a :class:`~clusterfit.sim.stepmodel.StepTimer`.

Speed: the replica never does per-token Python work. While the batch composition is fixed (no
arrival, completion or KV event), it plans a *decode segment* of many steps at once: step times as
one numpy array, the segment ending at the next completion, the KV limit, or a cap; an arrival in
the middle cuts the segment at the step boundary after it (under async scheduling one step later: the step
after that boundary was chosen before the arrival, Replica._admit). Steps that carry prefill chunks are
simulated one by one (about one per arriving request).

KV admission and KV use are two ledgers:

- Admission (the rule perf and the planner use, ``clusterfit.perfmodel.step.StepModel.kv_admitted_sequences``): a
  request is admitted only if its *reservation* fits the pool of one attention-DP rank (the step model's ``dp``
  ranks, each of ``kv_rank_budget_bytes``; the request goes to the rank with the most room). The reservation is
  ``kv_reservation_bytes(prompt, output)``: the KV of prompt + output tokens under the engine's 'full' policy
  (TensorRT-LLM GUARANTEED_NO_EVICT), of prompt + output / 2 under 'average' (vLLM / SGLang: pages are allocated
  as tokens are generated, half the output on average), windows, compression and recurrent state included. It is
  held until the request completes or is preempted (a preempted request reserves again, for its context so far
  plus the output still to come, when it is readmitted). A request whose reservation exceeds a whole rank's pool
  is admitted into an empty rank only. Under saturation with fixed lengths the replica therefore admits exactly
  ``kv_admitted_sequences(prompt, output)`` requests at once (tests/test_kv_admission.py).
- Use (what is really allocated, which drives preemption): in tokens, each sequence holds its context plus one
  block (the partly filled last block and the slot for the next token); a prompt holds its whole context from
  admission. Admission also needs the prompt to fit the tokens actually free below the watermark (vLLM's
  watermark: a share of blocks kept free at admission). When the running sequences' growth outruns the free
  tokens - an 'average' reservation is a mean, so a batch of long outputs does - the latest-admitted sequences
  are preempted (recompute). Use counts whole contexts: exact for full attention, an overestimate for
  sliding-window and compressed layers and for linear-attention state (their preemption comes early).

Step models without the admission rule (small test models) are admitted on the use ledger only.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

import numpy as np

from ..engines import mixed_batches, schedules_ahead
from .config import ReplicaSpec
from .gaps import TokenGaps
from .ledger import COMPLETED, Ledger
from .stepmodel import StepTimer

SEGMENT_CAP_STEPS = 512  # most decode steps planned at once with the exact step model (array work)
LINEAR_SEGMENT_CAP_STEPS = 1 << 20  # with tables a segment is O(1) however long


def kv_rule(model: Any) -> Any:
    """The step model if it has the KV-admission members (``kv_reservation_bytes`` ...), else None."""
    return model if hasattr(model, "kv_reservation_bytes") else None


class Replica:
    """The scheduler state of one replica (all token counts in tokens, times in seconds)."""

    def __init__(self, index: int, timer: StepTimer, ledger: Ledger, kv_capacity_tokens: int,
                 spec: ReplicaSpec, max_num_seqs: int, max_num_batched_tokens: int) -> None:
        self.index = index
        self.timer = timer
        self.ledger = ledger
        self.cap = float(kv_capacity_tokens)
        self.admit_cap = float(kv_capacity_tokens) * (1.0 - spec.watermark)
        self.block = spec.block_size
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.prefix_cache = spec.prefix_cache
        self.max_queue = spec.max_queue
        sp = spec.speculative
        if sp is None:
            self.tokens_per_step, self.verify, self.draft_factor = 1.0, 0, 1.0
        else:
            drafting = sp.drafting()
            self.tokens_per_step = drafting.tokens_per_step
            self.verify = drafting.draft_tokens
            self.draft_factor = drafting.step_factor
        self.alive = True
        self.accepting = True
        model = getattr(timer, "model", None)
        self.mixed = mixed_batches(model)
        # decode steps per scheduler call (vLLM V0 multi-step, engines.Engine.num_scheduler_steps)
        self.group = max(1, int(getattr(getattr(model, "engine", None), "num_scheduler_steps", 1) or 1))
        self.lookahead = schedules_ahead(model)  # step n+1's requests are chosen while step n runs (_admit)
        self.step_decodes = True  # whether the planned mixed step advances the decoding sequences
        # a disaggregated decode pool (sim.disagg, set by the Cluster): requests arrive with their prompt KV built
        self.kv_handoff = False
        # called with (request, time) as each request completes: a closed loop's clients (sim.clients), set by the
        # Cluster; None for open-loop arrivals
        self.on_done: Callable[[int, float], None] | None = None
        rule = kv_rule(model)
        self.kv_rule: Any = rule
        self.ranks, self.rank_budget = 1, math.inf
        if rule is not None:
            self.ranks = max(1, int(getattr(rule, "dp", 1) or 1))
            self.rank_budget = float(rule.kv_rank_budget_bytes)
        # a reservation fits a rank's pool up to this many bytes (see _rank_for)
        self.rank_limit = self.rank_budget * (1.0 + 1e-12)
        self.peak_batch = 0  # most requests admitted at once (prefilling + decoding) over the run
        self.reset(0.0)
        self.preemptions = 0
        self.completed = 0
        self.busy_s = 0.0
        self.steps = 0
        self.tokens_out = 0.0
        self.gaps = TokenGaps()  # inter-token gaps of the decoding sequences over the run (sim/gaps.py)
        self.samples = 0  # state samples taken while alive (queue length and KV utilisation sums)
        self.waiting_sum = 0.0
        self.kv_util_sum = 0.0

    def reset(self, now_s: float) -> None:
        """Empty the replica (start, restart after a failure): no requests, no KV, no cache."""
        self.waiting: deque[int] = deque()
        self.prefill: list[list[int]] = []  # [request, tokens left to compute, tokens in KV, context]
        self.prefill_reserved = 0.0
        self.running: dict[int, tuple[float, float, float]] = {}  # req -> (join G, join ctx, finish G)
        self.heap: list[tuple[float, int]] = []
        self.G = 0.0  # tokens each running sequence has produced since the replica started
        self.d = 0
        self.S = 0.0
        self.cache: OrderedDict[int, int] = OrderedDict()
        self.cache_tokens = 0
        self.clock = now_s
        self.version = getattr(self, "version", 0) + 1  # monotonic: stale events never match
        self.next_event_s = math.inf
        self.in_segment = False
        self.seg_t0 = 0.0
        self.seg_cum: np.ndarray | None = None  # step-end times of the segment (exact step model)
        self.seg_alpha = 0.0  # or: step j takes seg_alpha + seg_beta * j seconds (tables)
        self.seg_beta = 0.0
        self.seg_n = 0
        self.step_chunks: list[int] = []
        self.step_s_last = 0.0
        self.step_start_s = -math.inf  # when the last planned step began (-inf: idle since)
        self.pending_gap_s = 0.0  # steps since the decodes last advanced (prefill-only steps hold them back)
        self.held = 0  # sequences that have waited through those steps
        self.rank_reserved = [0.0] * self.ranks  # KV bytes reserved per attention-DP rank (admission ledger)
        self.reserved: dict[int, tuple[int, float]] = {}  # req -> (rank, reserved bytes)

    # --- views ----------------------------------------------------------------------------------
    @property
    def kv_used(self) -> float:
        """KV tokens held by prompts being prefilled and running sequences (not the prefix cache)."""
        return self.prefill_reserved + self.S + self.d * self.block

    def outstanding(self) -> int:
        """Requests on this replica: waiting, prefilling or decoding."""
        return len(self.waiting) + len(self.prefill) + self.d

    def in_flight(self) -> list[int]:
        """Every request on this replica."""
        return list(self.waiting) + [e[0] for e in self.prefill] + list(self.running)

    # --- events ---------------------------------------------------------------------------------
    def enqueue(self, req: int, now_s: float) -> None:
        """A request arrives at ``now_s``; if a decode segment is running, cut it at the next step.

        Afterwards ``next_event_s == inf`` tells that nothing is planned: the cluster must call :meth:`plan`.
        """
        self.waiting.append(req)
        if self.next_event_s == math.inf:
            if self.clock < now_s:
                self.clock = now_s
            return
        self.cut_segment(now_s)

    def cut_segment(self, now_s: float) -> bool:
        """End a running decode segment at the first step boundary at or after ``now_s`` (the state jumps to that
        boundary; ``next_event_s`` becomes inf and the cluster must call :meth:`plan`). False if there is no segment
        or that boundary is the segment's own end. Under multi-step scheduling (``group`` > 1) the boundary is the
        end of the group of ``group`` steps, counted from the segment's start, that ``now_s`` falls in; under async
        scheduling (``lookahead``) the end of the step after the one ``now_s`` falls in, chosen already (_admit)."""
        if self.in_segment and self.next_event_s > now_s:
            k = self._steps_until(now_s - self.seg_t0) + self.lookahead
            if self.group > 1:
                k = -(-k // self.group) * self.group
            if k < self.seg_n:
                self._advance_decode(k, self.seg_t0 + self._seg_elapsed(k))
                self.in_segment = False
                self.version += 1
                self.next_event_s = math.inf
                return True
        return False

    def finish_event(self) -> None:
        """Apply the step or segment that ends at ``next_event_s``."""
        t = self.next_event_s
        if self.in_segment:
            self._advance_decode(self.seg_n, t)
            self.in_segment = False
        else:
            self._finish_mixed_step(t)
        self.next_event_s = math.inf
        self._complete_finished(t)

    def plan(self) -> float:
        """Plan the next step or decode segment from ``clock``; return when it ends (inf: idle)."""
        self.version += 1
        if self.d and self.prefill_reserved + self.S + self.d * (self.block + self.tokens_per_step) > self.cap:
            self._make_room_for_decode()
        deferred = self._admit() if self.waiting else False
        if self.cache:
            self._evict_cache(self.cap - self.d * self.tokens_per_step)
        if self.prefill:
            t = self._plan_mixed_step()
        elif self.d:
            t = self._plan_segment(one_step=deferred)
        else:
            t = math.inf
            self.step_start_s = -math.inf
        self.next_event_s = t
        return t

    # --- scheduling -----------------------------------------------------------------------------
    def _evict_cache(self, budget_tokens: float) -> None:
        """Drop least recently used prefix-cache entries until KV + cache <= ``budget_tokens``."""
        used = self.kv_used
        cache = self.cache
        while cache and used + self.cache_tokens > budget_tokens:
            _, tok = cache.popitem(last=False)
            self.cache_tokens -= tok

    def _make_room_for_decode(self) -> None:
        """Preempt (by recompute) the latest-admitted sequences until the next step's tokens fit."""
        grow = self.d * self.tokens_per_step
        while self.d and self.kv_used + grow > self.cap:
            self._preempt_last()
            grow = self.d * self.tokens_per_step

    def _preempt_last(self) -> None:
        req, (jg, jc, _fg) = self.running.popitem()
        ctx = jc + (self.G - jg)
        self.S -= ctx
        self.d -= 1
        if self.d == 0:
            self.S = 0.0
        led = self.ledger
        led.generated[req] = min(led.output_tokens[req] - 1, int(ctx) - led.input_tokens[req])
        led.preemptions[req] += 1
        self.preemptions += 1
        self._release(req)
        self.waiting.appendleft(req)

    def _rank_for(self, cost: float) -> int:
        """The attention-DP rank whose pool takes a reservation of ``cost`` bytes (the one with the most room),
        or -1. The tolerance absorbs the rounding of summing reservations one by one against perf's division."""
        res = self.rank_reserved
        rank = min(range(self.ranks), key=res.__getitem__) if self.ranks > 1 else 0
        if res[rank] + cost <= self.rank_limit or res[rank] <= 0.0:
            return rank
        return -1

    def _release(self, req: int) -> None:
        """Free the KV reservation of a request that completed or was preempted."""
        held = self.reserved.pop(req, None)
        if held is not None:
            rank, cost = held
            left = self.rank_reserved[rank] - cost
            self.rank_reserved[rank] = left if left > 0.0 else 0.0

    def _admit(self) -> bool:
        """Admit waiting requests FCFS while batch slots, the KV reservation of a rank's pool and the KV
        actually free (below the watermark) allow (see the module docstring).

        Under async (overlap) scheduling (``lookahead``, engines.schedules_ahead) the engine chose this step's
        requests when it launched the previous one: a request that arrived after that launch, while the replica
        was busy, waits one more step (True is returned: the decode segment planned next is then one step long).
        An idle replica takes an arrival at once. A replica whose last running sequences finished in the step just
        ended is not idle if requests were waiting when that step was launched: the engine chose the next step for them
        then, and a request arriving during the step waits for the one after."""
        led = self.ledger
        waiting = self.waiting
        busy = self.d or self.prefill or (waiting and led.arrival_s[waiting[0]] <= self.step_start_s)
        cutoff = self.step_start_s if self.lookahead and busy else math.inf
        deferred = False
        block = self.block
        rule = self.kv_rule
        first_cost = led.reservation_bytes  # per request, precomputed (generated == 0)
        shared_cache = led.cached_tokens if self.prefix_cache else None
        one_rank = self.ranks == 1
        rank_reserved = self.rank_reserved
        # KV held + the next step's decode tokens, tokens
        used = self.prefill_reserved + self.S + self.d * (block + self.tokens_per_step)
        while waiting and self.d + len(self.prefill) < self.max_num_seqs:
            req = waiting[0]
            if led.arrival_s[req] > cutoff:
                deferred = True
                break
            gen = led.generated[req]
            ctx = led.input_tokens[req] + gen
            reserve = ctx + block
            if used + reserve > self.admit_cap:
                break
            if rule is not None:
                if gen == 0 and first_cost:
                    cost = first_cost[req]
                else:  # readmitted after a preemption: its context so far and the output still to come
                    cost = float(rule.kv_reservation_bytes(ctx, led.output_tokens[req] - gen))
                if one_rank:  # _rank_for inline
                    held = rank_reserved[0]
                    if held + cost > self.rank_limit and held > 0.0:
                        break
                    rank = 0
                else:
                    rank = self._rank_for(cost)
                    if rank < 0:
                        break
                rank_reserved[rank] += cost
                self.reserved[req] = (rank, cost)
            used += reserve
            waiting.popleft()
            hit = 0
            key = led.prefix_key[req]
            if self.prefix_cache and key >= 0:
                cached = self.cache.pop(key, 0)
                self.cache_tokens -= cached
                if gen == 0:
                    hit = min(cached, led.shared_tokens[req], ctx - 1)
            if shared_cache:  # a prefix warm on every replica (Requests.cached_tokens)
                warm = shared_cache[req]
                if warm > hit:
                    hit = warm if warm < ctx else ctx - 1
            self.prefill.append([req, ctx - hit, hit, ctx])
            self.prefill_reserved += reserve
        batch = self.d + len(self.prefill)
        if batch > self.peak_batch:
            self.peak_batch = batch
        return deferred

    def _plan_mixed_step(self) -> float:
        """One step carrying prefill chunks (FCFS under max_num_batched_tokens) and every decode token.

        A one-token chunk (a disaggregated handoff whose prompt KV arrived with it, a fully cached prompt, a prompt's
        last token) is costed as a decode token attending its context: the engines batch query-length-1 requests
        with the decodes (vLLM's attention backends split a batch at query length 1; its MLA runs them through the
        absorbed decode kernel, not the prefill path that up-projects the cached latents).

        An engine without mixed batches (SGLang) runs prefill steps that hold the decodes back, except on a
        disaggregated decode replica (``kv_handoff``) whose arrivals are all hand-offs: SGLang builds them a
        "prebuilt" batch with no forward pass and merges it into the running batch, which decodes in the same
        scheduler iteration (python/sglang/srt/disaggregation/decode.py: "Skip the prefill forward but only populate
        metadata"; get_next_disagg_decode_batch_to_run), so they ride the decode step as vLLM's do."""
        d, k = self.d, self.verify
        self.step_decodes = self.mixed or not self.prefill or (
            self.kv_handoff and all(entry[1] == 1 for entry in self.prefill))
        if not self.step_decodes:
            d = 0
        left = self.max_num_batched_tokens - d * (1 + k)
        p = 0
        pa = 0
        d1 = 0  # one-token chunks, run as decode tokens
        a1 = 0  # their contexts (keys attended, their own included)
        self.step_start_s = self.clock
        chunks = self.step_chunks
        chunks.clear()
        for entry in self.prefill:
            if left <= 0:
                break
            c = entry[1] if entry[1] < left else left
            if c == 1:
                d1 += 1
                a1 += entry[2] + 1
            else:
                pa += c * entry[2] + c * (c + 1) // 2
                p += c
            left -= c
            chunks.append(c)
        if d:   # the timer's step model verifies the drafts of the d decoding sequences itself (Cluster._setup)
            dt = self.timer.step_s(p, pa, d + d1, self.S + a1)
            if k:
                dt *= self.draft_factor
        else:
            dt = self.timer.step_s(p, pa, d1, a1)
        self.step_s_last = dt
        return self.clock + dt

    def _finish_mixed_step(self, t: float) -> None:
        led = self.ledger
        self.busy_s += self.step_s_last
        self.steps += 1
        if not self.d:
            self.pending_gap_s = 0.0
        elif not self.step_decodes:  # a prefill-only step: the running sequences wait through it
            self.pending_gap_s += self.step_s_last
            self.held = self.d
        else:
            self._emit_gap(self.step_s_last)
        if self.d and self.step_decodes:
            e = self.tokens_per_step
            self.G += e
            self.S += self.d * e
            self.tokens_out += self.d * e
        done_prefills = 0
        for entry, c in zip(self.prefill, self.step_chunks):
            entry[1] -= c
            entry[2] += c
            if entry[1] == 0:
                done_prefills += 1
        if done_prefills:
            keep = []
            for entry in self.prefill:
                if entry[1] > 0:
                    keep.append(entry)
                    continue
                req, _, _, ctx = entry
                self.prefill_reserved -= ctx + self.block
                if led.generated[req] == 0:
                    led.first_token_s[req] = t
                self.tokens_out += 1
                produced = led.generated[req] + 1
                remaining = led.output_tokens[req] - produced
                if remaining <= 0:
                    self._complete(req, ctx + 1, t)
                    continue
                fg = self.G + remaining
                self.running[req] = (self.G, ctx + 1.0, fg)
                heapq.heappush(self.heap, (fg, req))
                self.d += 1
                self.S += ctx + 1.0
            self.prefill = keep
        self.clock = t

    def _plan_segment(self, one_step: bool = False) -> float:
        """Plan pure-decode steps until the next completion, the KV limit or the cap (``one_step``: a single step,
        for requests _admit held back)."""
        heap, running = self.heap, self.running
        while heap:
            fg, req = heap[0]
            r = running.get(req)
            if r is not None and r[2] == fg:
                break
            heapq.heappop(heap)
        e = self.tokens_per_step
        d = self.d
        # (conditionals instead of min/max: this runs once per decode segment)
        n = math.ceil((heap[0][0] - self.G) / e - 1e-9)  # steps to the next completion
        if n < 1:
            n = 1
        n_kv = int((self.cap - (self.prefill_reserved + self.S + d * self.block)) // (d * e))  # KV limit
        if n_kv < n:
            n = n_kv if n_kv > 1 else 1
        if one_step:  # requests wait for the next step boundary (_admit)
            n = 1
        clock = self.clock
        self.seg_t0 = clock
        self.in_segment = True
        timer = self.timer
        if timer.exact:
            if n > SEGMENT_CAP_STEPS:
                n = SEGMENT_CAP_STEPS
            times = timer.decode_steps_s(d, self.S, n, e) * self.draft_factor
            self.seg_cum = np.cumsum(times)
            self.seg_n = n
            return clock + self._seg_elapsed(n)
        alpha, beta, n_lin = timer.decode_linear(d, self.S, e)
        if n_lin < n:
            n = n_lin
        if n > LINEAR_SEGMENT_CAP_STEPS:
            n = LINEAR_SEGMENT_CAP_STEPS
        alpha *= self.draft_factor
        beta *= self.draft_factor
        self.seg_alpha = alpha
        self.seg_beta = beta
        self.seg_n = n
        return clock + (n * alpha + beta * (n * (n - 1) // 2))  # _seg_elapsed(n)

    def _seg_elapsed(self, k: int) -> float:
        """Seconds from the segment start to the end of its ``k``-th step."""
        if self.seg_cum is not None:
            return float(self.seg_cum[k - 1])
        return k * self.seg_alpha + self.seg_beta * (k * (k - 1) // 2)

    def _steps_until(self, x_s: float) -> int:
        """Fewest steps (>= 1) of the segment whose end is at or after ``x_s`` seconds from its start."""
        if self.seg_cum is not None:
            return int(np.searchsorted(self.seg_cum, x_s, side="left")) + 1
        a, b = self.seg_alpha, self.seg_beta
        if x_s <= a:
            return 1
        if b > 1e-15 * a:
            h = a - b / 2
            k = math.ceil((-h + math.sqrt(h * h + 2 * b * x_s)) / b)
        else:
            k = math.ceil(x_s / a)
        k = max(1, k)
        while k > 1 and self._seg_elapsed(k - 1) >= x_s:
            k -= 1
        while self._seg_elapsed(k) < x_s:
            k += 1
        return k

    def _emit_gap(self, step_s: float) -> None:
        """The decodes advance at the end of a ``step_s`` step: one gap of ``step_s`` per decoding sequence, except
        that the ``held`` sequences that waited through prefill-only steps since their last token see those too."""
        held = self.held if self.held < self.d else self.d
        if held:
            self.gaps.add(self.pending_gap_s + step_s, held)
        if self.d > held:
            self.gaps.add(step_s, self.d - held)
        self.pending_gap_s = 0.0
        self.held = 0

    def _advance_decode(self, steps: int, t: float) -> None:
        """Apply ``steps`` pure-decode steps of the current segment, ending at ``t``."""
        e = self.tokens_per_step
        if self.d:
            if self.seg_cum is not None:
                gaps = np.diff(self.seg_cum[:steps], prepend=0.0)
                self._emit_gap(float(gaps[0]))
                self.gaps.add_many(gaps[1:], self.d)
            elif self.held:  # step j of the segment takes seg_alpha + seg_beta * j
                self._emit_gap(self.seg_alpha)
                self.gaps.add_linear(self.seg_alpha + self.seg_beta, self.seg_beta, steps - 1, self.d)
            else:
                self.gaps.add_linear(self.seg_alpha, self.seg_beta, steps, self.d)
        self.step_start_s = self.seg_t0 + (self._seg_elapsed(steps - 1) if steps > 1 else 0.0)
        self.busy_s += self._seg_elapsed(steps)
        self.steps += steps
        self.G += steps * e
        self.S += steps * e * self.d
        self.tokens_out += steps * e * self.d
        self.clock = t

    def _complete_finished(self, t: float) -> None:
        heap, running = self.heap, self.running
        g = self.G + 1e-9
        while heap and heap[0][0] <= g:
            fg, req = heapq.heappop(heap)
            r = running.get(req)
            if r is None or r[2] != fg:
                continue
            del running[req]
            ctx = r[1] + (self.G - r[0])
            self.S -= ctx
            self.d -= 1
            self._complete(req, ctx, t)
        if self.d == 0:
            self.S = 0.0

    def _complete(self, req: int, ctx: float, t: float) -> None:
        led = self.ledger
        led.finish_s[req] = t
        led.status[req] = COMPLETED
        self.completed += 1
        if self.on_done is not None:
            self.on_done(req, t)
        held = self.reserved.pop(req, None)  # _release, inline
        if held is not None:
            rank, cost = held
            left = self.rank_reserved[rank] - cost
            self.rank_reserved[rank] = left if left > 0.0 else 0.0
        key = led.prefix_key[req]
        if self.prefix_cache and key >= 0:
            tok = int(ctx)
            old = self.cache.pop(key, 0)
            self.cache[key] = tok
            self.cache_tokens += tok - old
