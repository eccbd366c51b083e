"""What the simulator needs from the performance model, and a fast lookup of step times.

The simulator codes against :class:`StepCosts` (a Protocol): anything with these members works,
in particular ``clusterfit.perfmodel.compile_step(...)``. Tests use small step models of their own.

Calling a full op-level model once per engine step would dominate the simulation (millions of steps),
so :class:`StepTimer` evaluates the model once, vectorised, on grids and interpolates:

    step_s(p, pa, d, da) ~= F(p, d) + A_pre(p, pa) + A_dec(d, da)

where F is the step with no attention context (GEMMs, communication, overheads), A_pre the extra time
of prefill attention and A_dec the extra time of decode attention (both linear-ish in the keys
attended). Pure prefill and pure decode steps are exact at the grid points; between points the error
is that of linear interpolation on geometric grids (a test bounds it). ``exact=True`` calls the model
directly instead.

A model that also has ``gpu_step_s`` (the same arguments, without the engine's host time) and ``host_terms``
(clusterfit's StepModel: seconds per step, per running sequence, and whether the host overlaps the GPU) is tabled on
its GPU time, and the host time is added exactly at each lookup: a sum, or under async scheduling max(GPU, host),
which no additive table of the whole step can follow.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..errors import ClusterfitError


@runtime_checkable
class StepCosts(Protocol):
    """One replica's engine step time, in seconds (numpy-broadcasting).

    prefill_tokens: new prompt tokens computed this step.
    prefill_attended: sum over those tokens of the keys each attends (a chunk of n tokens after c
        cached contributes n*c + n*(n+1)/2).
    decode_seqs: sequences producing one token this step.
    decode_attended: sum of their context lengths, tokens.
    max_num_seqs: the engine's cap on running sequences (replica-wide).

    Optional KV-admission members (clusterfit.perfmodel.StepModel has them; sim.replica uses them when present):
    ``dp`` (attention-DP ranks, each its own KV pool), ``kv_rank_budget_bytes`` (one rank's pool) and
    ``kv_reservation_bytes(prompt, output)`` (what one request reserves at admission under the engine's policy).
    Speculative decoding needs ``with_verify(draft_tokens)``: the same model whose decoding sequences each verify that
    many drafts per step (clusterfit's StepModel has it; sim.cluster refuses a model without it).
    """

    @property
    def kv_capacity_tokens(self) -> float: ...

    @property
    def max_num_seqs(self) -> int: ...

    @property
    def gpus(self) -> int: ...

    def step_s(self, prefill_tokens, prefill_attended, decode_seqs, decode_attended): ...

    def decode_step_s(self, batch, context): ...

    def prefill_s(self, tokens, cached=0): ...


def _geom_grid(lo: float, hi: float, n: int) -> np.ndarray:
    """``n`` points from lo to hi, geometric, as unique floats (lo > 0)."""
    return np.unique(np.geomspace(max(lo, 1e-9), max(hi, lo * 1.0001), n))


class StepTimer:
    """Step times for the simulator, from a :class:`StepCosts`, in seconds.

    max_num_batched_tokens: most tokens (prefill + decode) in one step.
    max_num_seqs: most sequences in one step (the decode grid's upper end).
    max_context: longest context a sequence can reach, tokens (sets the grids' upper ends).
    exact: call the model directly for every step instead of interpolating tables.
    """

    def __init__(self, model: StepCosts, max_num_batched_tokens: int, max_num_seqs: int, max_context: int,
                 exact: bool = False) -> None:
        if max_num_batched_tokens < 1 or max_num_seqs < 1 or max_context < 1:
            raise ClusterfitError("max_num_batched_tokens, max_num_seqs and max context must be >= 1")
        self.model = model
        self.exact = exact
        self.max_num_batched_tokens = int(max_num_batched_tokens)
        self.max_num_seqs = int(max_num_seqs)
        self.max_context = int(max_context)
        # the model's host law when it keeps the host time apart (see the module docstring); the tables then hold
        # its GPU time
        gpu_step = getattr(model, "gpu_step_s", None)
        self._host: tuple[float, float, bool] | None = getattr(model, "host_terms", None) if gpu_step else None
        self._tabled: Callable[..., Any] = gpu_step if gpu_step is not None and self._host is not None else model.step_s
        if not exact:
            self._build_tables()

    # --- tables -----------------------------------------------------------------------------
    def _host_time(self, prefill_tokens, decode_seqs):
        """The host time of a step's shape (StepModel.host_s's law from host_terms, without numpy for scalars: this
        runs on the simulator's hot path)."""
        assert self._host is not None
        h0, hs, _ = self._host
        return h0 + hs * (decode_seqs + (prefill_tokens > 0))

    def _with_host(self, gpu, prefill_tokens, decode_seqs):
        """A step's time from its GPU time (scalar or array) and the host time of its shape."""
        assert self._host is not None
        host = self._host_time(prefill_tokens, decode_seqs)
        if self._host[2]:  # overlapped with the GPU (async scheduling)
            return np.maximum(gpu, host) if isinstance(gpu, np.ndarray) else max(gpu, host)
        return gpu + host

    def _call(self, p, pa, d, da) -> np.ndarray:
        out = np.asarray(self._tabled(p, pa, d, da), dtype=float)
        if not np.all(np.isfinite(out)) or np.any(out <= 0):
            raise ClusterfitError("the step model returned a non-positive or non-finite step time")
        return out

    def _build_tables(self) -> None:
        mb = self.max_num_seqs
        # decode batch: every integer up to 512, then a geometric grid.
        d_axis = np.arange(0, min(mb, 512) + 1, dtype=float)
        if mb > 512:
            d_axis = np.unique(np.concatenate([d_axis, np.round(_geom_grid(512, mb, 48))]))
        p_axis = np.unique(np.concatenate([[0.0], np.round(_geom_grid(1, self.max_num_batched_tokens, 72))]))
        c_axis = np.unique(np.concatenate([[0.0], _geom_grid(1, self.max_context, 64)]))
        self.d_axis, self.p_axis, self.c_axis = d_axis, p_axis, c_axis
        P, D = np.meshgrid(p_axis, d_axis, indexing="ij")
        pos = (P + D) > 0
        f = np.zeros_like(P)
        f[pos] = self._call(P[pos], 0.0, D[pos], 0.0)
        self.F = f  # [p, d]
        # prefill attention: mean keys per prefill token c (0..max_context)
        Pp, Cp = np.meshgrid(p_axis[1:], c_axis, indexing="ij")
        ap = self._call(Pp, Pp * Cp, 0.0, 0.0) - self._call(Pp, 0.0, 0.0, 0.0)
        self.A_pre = np.vstack([np.zeros((1, c_axis.size)), np.maximum(ap, 0.0)])  # [p, c]
        # decode attention: mean context per decode sequence c
        Dd, Cd = np.meshgrid(d_axis[1:], c_axis, indexing="ij")
        ad = self._call(0.0, 0.0, Dd, Dd * Cd) - self._call(0.0, 0.0, Dd, 0.0)
        self.A_dec = np.vstack([np.zeros((1, c_axis.size)), np.maximum(ad, 0.0)])  # [d, c]
        self._p_list = p_axis.tolist()
        self._d_list = d_axis.tolist()
        self._c_list = c_axis.tolist()
        self._d_exact = mb <= 512
        self._F_list = f.tolist()
        self._Apre_list = self.A_pre.tolist()
        self._Adec_list = self.A_dec.tolist()

    @staticmethod
    def _locate(axis: list[float], x: float) -> tuple[int, float]:
        """Index i and weight w so that x ~ axis[i]*(1-w) + axis[i+1]*w (clamped at the ends)."""
        n = len(axis)
        if x <= axis[0]:
            return 0, 0.0
        if x >= axis[-1]:
            if x > axis[-1] and n >= 2:  # linear extrapolation past the last point
                return n - 2, (x - axis[-2]) / (axis[-1] - axis[-2])
            return n - 2, 1.0
        i = bisect_right(axis, x) - 1
        return i, (x - axis[i]) / (axis[i + 1] - axis[i])

    def _d_index(self, d: int) -> tuple[int, float]:
        if self._d_exact:
            return (d - 1, 1.0) if d > 0 else (0, 0.0)
        return self._locate(self._d_list, float(d))

    def _bilerp(self, table: list[list[float]], i: int, wi: float, per_token_context: float) -> float:
        """Bilinear interpolation of an attention table: rows by step size (i, wi), columns by mean context."""
        ic, wc = self._locate(self._c_list, per_token_context)
        r0, r1 = table[i], table[i + 1]
        a0 = r0[ic] + (r0[ic + 1] - r0[ic]) * wc  # each row linear in the context
        a1 = r1[ic] + (r1[ic + 1] - r1[ic]) * wc
        return a0 + (a1 - a0) * wi

    def step_s(self, prefill_tokens: float, prefill_attended: float, decode_seqs: int,
               decode_attended: float) -> float:
        """Time of one mixed step, seconds (scalar arguments as in :class:`StepCosts`)."""
        if self.exact:
            return float(np.asarray(self.model.step_s(prefill_tokens, prefill_attended, decode_seqs,
                                                      decode_attended), dtype=float))
        ip, wp = self._locate(self._p_list, float(prefill_tokens))
        idd, wd = self._d_index(decode_seqs)
        F = self._F_list
        f0 = F[ip][idd] + (F[ip][idd + 1] - F[ip][idd]) * wd
        f1 = F[ip + 1][idd] + (F[ip + 1][idd + 1] - F[ip + 1][idd]) * wd
        t = f0 + (f1 - f0) * wp
        if prefill_tokens > 0:
            t += self._bilerp(self._Apre_list, ip, wp, prefill_attended / prefill_tokens)
        if decode_seqs > 0:
            t += self._bilerp(self._Adec_list, idd, wd, decode_attended / decode_seqs)
        if self._host is not None:
            return self._with_host(t, prefill_tokens, decode_seqs)
        return t

    def decode_linear(self, decode_seqs: int, decode_attended0: float,
                      tokens_per_step: float = 1.0) -> tuple[float, float, int]:
        """Pure-decode step times as a line: step j (0-based) takes ``alpha + beta * j`` seconds for
        ``steps`` steps (>= 1), while the mean context stays inside one table cell (where the table's
        interpolation is linear, so this is exactly what :meth:`decode_steps_s` returns) and, under async
        scheduling, on one side of the host time (a step is max(GPU, host)). Not available with ``exact=True``."""
        alpha, beta, steps = self._gpu_decode_linear(decode_seqs, decode_attended0, tokens_per_step)
        if self._host is None:
            return alpha, beta, steps
        host = self._host_time(0, decode_seqs)
        if not self._host[2]:
            return alpha + host, beta, steps
        if alpha >= host:  # the GPU line only grows (beta >= 0): it stays above the host
            return alpha, beta, steps
        # host-bound until the GPU line crosses it: flat at the host time for those steps
        cross = int((host - alpha) / beta) + 1 if beta > 0 else steps
        return host, 0.0, max(1, min(steps, cross))

    def _gpu_decode_linear(self, decode_seqs: int, decode_attended0: float,
                           tokens_per_step: float) -> tuple[float, float, int]:
        """decode_linear of the tabled time alone (the GPU's, when the host time is kept apart)."""
        d = decode_seqs
        c0 = decode_attended0 / d
        cax = self._c_list
        if self._d_exact:  # fast path: the batch is a table row
            f = self._F_list[0][d]
            row = self._Adec_list[d]
            last = len(cax) - 1
            # ic = _locate(cax, c0)[0], inline
            if c0 <= cax[0]:
                ic = 0
            elif c0 >= cax[last]:
                ic = last - 1
            else:
                ic = bisect_right(cax, c0) - 1
            x0, x1 = cax[ic], cax[ic + 1]
            slope = (row[ic + 1] - row[ic]) / (x1 - x0)
            alpha = f + row[ic] + slope * (c0 - x0)
            if c0 >= x1 or ic + 1 >= last and c0 >= x0:
                return alpha, slope * tokens_per_step, 1 << 30
            steps = int((x1 - c0) / tokens_per_step) + 1
            return alpha, slope * tokens_per_step, steps if steps > 1 else 1
        idd, wd = self._d_index(d)
        F = self._F_list
        f = F[0][idd] + (F[0][idd + 1] - F[0][idd]) * wd
        A = self._Adec_list
        lo, hi = A[idd], A[idd + 1]
        ic, wc = self._locate(cax, c0)
        x0, x1 = cax[ic], cax[ic + 1]
        y0 = lo[ic] + (hi[ic] - lo[ic]) * wd
        y1 = lo[ic + 1] + (hi[ic + 1] - lo[ic + 1]) * wd
        slope = (y1 - y0) / (x1 - x0)
        alpha = f + y0 + slope * (c0 - x0)
        beta = slope * tokens_per_step
        if c0 >= x1 or ic + 2 >= len(cax) and c0 >= x0:  # past the grid: one line to infinity
            steps = 1 << 30
        else:
            steps = max(1, int((x1 - c0) / tokens_per_step) + 1)
        return alpha, beta, steps

    def decode_steps_s(self, decode_seqs: int, decode_attended0: float, steps: int,
                       tokens_per_step: float = 1.0) -> np.ndarray:
        """Times of ``steps`` consecutive pure-decode steps, seconds (array of length ``steps``).

        The batch stays ``decode_seqs`` sequences; their summed context starts at ``decode_attended0``
        and grows by ``decode_seqs * tokens_per_step`` per step. Under speculative decoding the timer's model is the
        verifying one (StepModel.with_verify, as the Cluster builds it), so its steps are verify passes.
        """
        ctx = decode_attended0 + decode_seqs * tokens_per_step * np.arange(steps)
        if self.exact:
            return np.asarray(self.model.step_s(0.0, 0.0, decode_seqs, ctx), dtype=float) * np.ones(steps)
        idd, wd = self._d_index(decode_seqs)
        F = self.F
        f = F[0, idd] + (F[0, idd + 1] - F[0, idd]) * wd
        row = self.A_dec[idd] + (self.A_dec[idd + 1] - self.A_dec[idd]) * wd
        c = ctx / decode_seqs
        a = np.interp(c, self.c_axis, row)
        if c[-1] > self.c_axis[-1]:  # extrapolate linearly past the grid
            over = c > self.c_axis[-1]
            slope = (row[-1] - row[-2]) / (self.c_axis[-1] - self.c_axis[-2])
            a[over] = row[-1] + slope * (c[over] - self.c_axis[-1])
        if self._host is not None:
            return self._with_host(f + a, 0.0, decode_seqs)
        return f + a
