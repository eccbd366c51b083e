"""Capacity mode: a fixed budget (``plan --nodes N`` or ``--gpus N``, no load) -> the load it carries.

"I have N nodes of X: what is the best layout, and how much load does it carry within my SLOs?" For every
compiled candidate of the search (planner.py's, same curves, same SLO verdicts), the replicas that fit in the
budget are packed as the planner packs them (replicas smaller than a node share nodes, larger ones take whole
nodes), N+k spares are set aside (planner.spare_replicas), and the serving replicas run at the largest batch within
the SLOs (the capacity curves' full-capacity point). Disaggregated serving splits the budget between a prefill
pool (the prefill layout with the most requests/s per GPU) and a decode pool, at the split that carries the most
requests/s. Layouts are ranked by requests/s carried (ties: fewer nodes per replica, then lower TPOT); the
recommended plan is the best layout of all systems and its Pareto front (output tokens/s per GPU of the budget
against tokens/s per user) is drawn per system over every aggregated batch within the SLOs, plus the
disaggregated configurations found.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..intervals import decode_regime
from ..schema import CapacityAnswer, CapacityLayout, ParetoPoint, PlanOption, PlanResult, ServingEngineSettings
from .cost import GpuHourPrice, catalog_prices, resolve_price
from .pareto import pareto_front
from .planner import (QUEUEING_MODEL, PlanQuestion, longest_request, _bands, _explain, _no_plan, _nodes, _pareto_point,
                      _row, _Sized, _speculative_block, node_is_failure_unit, packed_with_spares, replicas_that_fit,
                      smallest_serving_budget, spare_replicas)
from .search import Candidate, SearchResult

if TYPE_CHECKING:
    from ..arch import ModelArch
    from ..hardware import System


def budget_gpus(req: PlanQuestion, system: System) -> int:
    """GPUs of ``system`` in the budget: nodes x GPUs per node, or the GPUs asked."""
    if req.budget_nodes is not None:
        return req.budget_nodes * system.gpus_per_node
    assert req.budget_gpus is not None
    return req.budget_gpus


def _footprint(n: int, g: int, node: int, by_gpu: bool) -> int:
    """GPUs of the budget a pool of ``n`` replicas of ``g`` GPUs occupies (whole nodes unless the budget is GPUs
    and the replicas are smaller than a node)."""
    if by_gpu and g <= node:
        return n * g
    return _nodes(n, g, node) * node


def _rented(req: PlanQuestion, system: System, price) -> int:
    """GPUs paid for: the budget; a GPU budget on a system rented per node is rounded up to whole nodes."""
    g = budget_gpus(req, system)
    if req.budget_gpus is not None and (price is None or price.rent_unit != "gpu"):
        return math.ceil(g / system.gpus_per_node) * system.gpus_per_node
    return g


def _aggregated(c: Candidate, req: PlanQuestion, price) -> _Sized | None:
    a = c.agg
    ok = a.feasible
    if not ok.any():
        return None
    node = c.system.gpus_per_node
    fit, k, n = packed_with_spares(budget_gpus(req, c.system), req.failover, c.gpus, node, price)
    if fit < 1 or n < 1:
        return None
    caps = np.where(ok, a.rate_rps, -np.inf)
    b = int(np.argmax(caps))
    rate = n * float(a.rate_rps[b])
    return _Sized("aggregated", c.system, c.precision_name, c.kv_dtype, c, None, float(a.batch[b]), float(a.batch[b]),
                  float(caps[b]), n, 0, k, float(a.tpot_s[b]), float(a.ttft_s[b]), rate, rate,
                  _nodes(fit, c.gpus, node), fit * c.gpus, price, tpot_judged_s=float(a.tpot_judged_s[b]),
                  budget_rented_gpus=_rented(req, c.system, price), failover=req.failover)


def _disaggregated(cands: list[Candidate], req: PlanQuestion, price) -> list[_Sized]:
    """Per decode layout, the prefill/decode split of the budget that carries the most requests/s."""
    pre = [c for c in cands if c.prefill is not None and c.prefill.rate_rps > 0]
    if not pre:
        return []
    p = max(pre, key=lambda c: c.prefill.rate_rps / c.gpus if c.prefill else 0.0)
    assert p.prefill is not None
    system = p.system
    node, budget, by_gpu = system.gpus_per_node, budget_gpus(req, system), req.budget_gpus is not None
    out = []
    for c in cands:
        d = c.decode
        if d is None or not d.feasible.any():
            continue
        caps = np.where(d.feasible, d.rate_rps, -np.inf)
        b = int(np.argmax(caps))
        best = None
        n_p = 1
        while True:
            k_p = spare_replicas(req.failover, n_p, p.gpus, node, price)
            used = _footprint(n_p, p.gpus, node, by_gpu)
            if used >= budget:
                break
            fit_d, k_d, serving_d = packed_with_spares(budget - used, req.failover, c.gpus, node, price)
            serving_p = n_p - k_p
            if serving_p >= 1 and serving_d >= 1:
                rate = min(serving_p * p.prefill.rate_rps, serving_d * float(d.rate_rps[b]))
                if best is None or rate > best[0] + 1e-12:
                    best = (rate, serving_p, serving_d, k_p, k_d, fit_d)
            n_p += 1
        if best is None:
            continue
        rate, sp, sd, k_p, k_d, fit_d = best
        nodes = _nodes(sp + k_p, p.gpus, node) + _nodes(fit_d, c.gpus, node)
        s = _Sized("disaggregated", system, c.precision_name, c.kv_dtype, c, p, float(d.batch[b]), float(d.batch[b]),
                   float(caps[b]), sd, sp, k_d, float(d.tpot_s[b]), float(p.prefill.ttft_s), rate, rate, nodes,
                   fit_d * c.gpus + (sp + k_p) * p.gpus, price, budget_rented_gpus=_rented(req, system, price),
                   prefill_spares=k_p)
        out.append(s)
    return out


def _no_spare_room(cands: list[Candidate], req: PlanQuestion, price, what: str) -> str | None:
    """Why a system whose layouts meet the SLOs and fit in the budget has no plan when N+k spares leave no replica
    serving, naming the failure unit and the smallest budget that keeps one serving (None: not the reason)."""
    if req.failover <= 0:
        return None
    system = cands[0].system
    node = system.gpus_per_node
    meets = [c for c in cands if c.agg.feasible.any()]
    budget, k = budget_gpus(req, system), req.failover
    held = [(x, fit) for x in meets if (fit := packed_with_spares(budget, k, x.gpus, node, price)[0]) >= 1]
    if not held:
        return None
    c, fit = min(held, key=lambda h: (h[0].gpus, h[0].nodes))
    if c.gpus >= node:
        unit = (f"a {c.label()} replica takes {c.nodes} node(s), and N+{k} keeps {k} spare replica(s) beside a "
                "serving one")
    elif node_is_failure_unit(c.gpus, node, price):
        rented = "has no price quote and is taken as rented per node" if price is None else "is rented per node"
        unit = (f"{system.id} {rented}, so a node is the failure unit: a node loss takes every replica on it, and "
                f"N+{k} needs {k} node(s) of spares of their own")
    else:
        unit = f"N+{k} keeps {k} spare replica(s) beside a serving one (rented per GPU: a replica's GPUs fail alone)"
    by_nodes = req.budget_nodes is not None
    # the smallest budget on the budget's grid in which some layout keeps a replica serving: larger than this one
    # (no layout serves in it, and packed_with_spares' serving replicas never fall as the budget grows)
    gpus = min(smallest_serving_budget(k, x.gpus, node, price, node if by_nodes else 1) for x in meets)
    packed = [(x, packing) for x in meets if (packing := packed_with_spares(gpus, k, x.gpus, node, price))[2] >= 1]
    best, (_, spares, serving) = min(packed, key=lambda h: (h[0].gpus, h[0].nodes))
    size = f"{gpus // node} node(s)" if by_nodes else f"{gpus} GPU(s)"
    return (f"{system.id}: {c.label()} meets the targets and {what} hold {fit} of its replica(s), but N+{k} spares "
            f"leave none serving: {unit}; the smallest budget that keeps a replica serving is {size} "
            f"({best.label()}: {serving} serving + {spares} spare)")


def _key(s: _Sized) -> tuple:
    """Most requests/s first; ties: fewer nodes per replica, then lower TPOT."""
    return (-round(s.rate_rps, 9), s.main.nodes, s.tpot_s)


def _layout_row(s: _Sized, osl: float, budget: int, model: ModelArch, one_token: bool = False) -> CapacityLayout:
    """One layout of the budget, its figures with their intervals (load in the regime of the batch it runs); with
    one output token per request (``one_token``) no TPOT and no tokens/s per user (no request decodes)."""
    c = s.main
    tp, pp, ep, dp = c.layout
    out_tps = s.rate_rps * osl
    p = s.prefill
    bands, regime = _bands(c, model), decode_regime(s.batch)
    tpot = s.tpot_s if s.tpot_judged_s is None else s.tpot_judged_s
    return CapacityLayout(
        system=s.system.id, mode=s.mode, precision=s.precision, kv_dtype=s.kv_dtype, layout=c.label(), tp=tp, pp=pp,
        ep=ep, dp=dp, gpus_per_replica=c.gpus, nodes_per_replica=c.nodes, replicas=s.replicas + s.spares,
        serving_replicas=s.replicas, spare_replicas=s.spares, gpus_used=s.gpus, idle_gpus=max(budget - s.gpus, 0),
        batch=s.batch, requests_per_s=s.rate_rps, output_tokens_per_s=out_tps,
        output_tokens_per_s_per_gpu=out_tps / budget, tokens_per_s_per_user=None if one_token else 1.0 / s.tpot_s,
        ttft_s=s.ttft_s, tpot_s=None if one_token else tpot,
        prefill_layout=None if p is None else p.label(),
        prefill_replicas=None if p is None else s.prefill_replicas + s.prefill_pool_spares,
        xPyD=None if p is None else f"{s.prefill_replicas + s.prefill_pool_spares}P{s.replicas + s.spares}D",
        requests_per_s_interval=bands.rate(s.rate_rps, regime), output_tokens_per_s_interval=bands.rate(out_tps, regime),
        output_tokens_per_s_per_gpu_interval=bands.rate(out_tps / budget, regime),
        tokens_per_s_per_user_interval=None if one_token else bands.rate(1.0 / s.tpot_s, regime),
        ttft_s_interval=bands.time(s.ttft_s, "prefill"),
        tpot_s_interval=None if one_token else bands.time(tpot, regime))


def _pareto(cands: list[Candidate], sized: list[_Sized], req: PlanQuestion, osl: float, model: ModelArch,
            price) -> list[ParetoPoint]:
    """Output tokens/s per GPU of the budget against tokens/s per user: every aggregated batch within the TTFT
    target and KV (the planner's front, with the replicas serving in the budget beside the N+k spares, packed as
    _aggregated packs them under the system's ``price``), plus the disaggregated configurations found."""
    xs, ys, meta = [], [], []
    for c in cands:
        a = c.agg
        budget = budget_gpus(req, c.system)
        n = packed_with_spares(budget, req.failover, c.gpus, c.system.gpus_per_node, price)[2]
        if n < 1:
            continue
        m = a.kv_ok & a.ttft_ok
        xs.append(1.0 / a.tpot_s[m])
        ys.append(n * a.rate_rps[m] * osl / budget)
        meta += [("aggregated", c, b) for b in a.batch[m]]
    for s in sized:
        if s.mode == "disaggregated":
            xs.append(np.array([1.0 / s.tpot_s]))
            ys.append(np.array([s.rate_rps * osl / budget_gpus(req, s.system)]))
            meta.append(("disaggregated", s.main, s.batch))
    if not xs:
        return []
    x, y = np.concatenate(xs), np.concatenate(ys)
    factors: dict = {}
    return [_pareto_point(float(x[i]), float(y[i]), meta[i][0], meta[i][1], float(meta[i][2]), model, factors)
            for i in pareto_front(x, y)]


def plan_capacity(req: PlanQuestion, model: ModelArch, result: SearchResult) -> PlanResult:
    """The capacity-mode answer: every layout that fits in the budget with the load it carries, the best first."""
    wl, slo = req.workload, req.slo
    osl = wl.osl_mean_tokens
    prices = catalog_prices()
    groups: dict[tuple[str, str, str], list[Candidate]] = {}
    for c in result.candidates:
        groups.setdefault((c.system.id, c.precision_name, c.kv_dtype), []).append(c)
    sized: list[_Sized] = []
    per_sys: dict[str, list[_Sized]] = {}
    price_of: dict[str, GpuHourPrice | None] = {}
    for (sys_id, _, _), cands in groups.items():
        system = cands[0].system
        price = price_of[sys_id] = resolve_price(sys_id, system.gpu.id, req.prices, prices)
        opts = [s for s in (_aggregated(c, req, price) for c in cands) if s is not None]
        if req.disaggregated:
            opts += _disaggregated(cands, req, price)
        sized += opts
        per_sys.setdefault(sys_id, []).extend(opts)
    sized.sort(key=_key)
    best = sorted((min(v, key=_key) for v in per_sys.values() if v), key=_key)
    rows: list[PlanOption] = []
    for s in best:
        _explain(s, wl, slo)
        rows.append(_row(s, wl, req.hours_per_month, model))
    budgets = {c.system.id: budget_gpus(req, c.system) for c in result.candidates}
    what = f"{req.budget_nodes} node(s)" if req.budget_nodes is not None else f"{req.budget_gpus} GPU(s)"
    out = PlanResult(model=model.name, workload=f"{wl.describe_lengths()}; capacity of {what} per system",
                     slo=slo.describe(),
                     failover=req.failover, engine=req.engine, feasible=bool(rows), recommended=None, per_system=rows,
                     pareto={sys_id: _pareto([c for c in result.candidates if c.system.id == sys_id],
                                             per_sys.get(sys_id, []), req, osl, model, price_of.get(sys_id))
                             for sys_id in budgets},
                     configurations_evaluated=result.configurations_evaluated,
                     candidates_compiled=len(result.candidates), not_fitting=result.skipped,
                     queueing_model=QUEUEING_MODEL, one_output_token=wl.one_output_token or None,
                     hours_per_month=req.hours_per_month,
                     speculative=_speculative_block(req.speculative, model, req.catalog.draft_head
                                                    if req.catalog is not None else None),
                     capacity=CapacityAnswer(nodes=req.budget_nodes, gpus=req.budget_gpus, budget_gpus=budgets,
                                             layouts=[_layout_row(s, osl, budgets[s.system.id], model,
                                                                  wl.one_output_token) for s in sized]))
    out.longest_request = longest_request(wl)
    if rows:
        top = rows[0]
        out.recommended = top.model_copy(update={"explanation": _text(top, rows, what, slo.describe())})
        # the settings the recommended replica was compiled with, as plan_cluster reports them (per attention-DP
        # rank; deploy rebuilds the engine from them)
        settings = req.catalog.settings if req.catalog is not None else None
        out.engine_settings = ServingEngineSettings.of(best[0].main.step.engine,
                                                       settings.given() if settings is not None else [])
    _why_not(out, req, result, model, groups, rows, budgets, what)
    return out


def _why_not(out: PlanResult, req: PlanQuestion, result: SearchResult, model: ModelArch,
             groups: dict[tuple[str, str, str], list[Candidate]], rows: list[PlanOption], budgets: dict[str, int],
             what: str) -> None:
    """``no_plan`` (each system without a row: spares that leave no replica serving, no layout meeting the targets
    within the budget, else its closest miss) and, without any row, ``explanation``."""
    slo, prices = req.slo, catalog_prices()
    explained = {r.system for r in rows}   # systems with a row, or with their line in no_plan
    spare_lines = []
    for (sys_id, _, _), cands in groups.items():   # systems without a row: why (spares, else the closest miss)
        if sys_id in explained:
            continue
        explained.add(sys_id)
        price = resolve_price(sys_id, cands[0].system.gpu.id, req.prices, prices)
        of_sys = [c for (sid, _, _), cs in groups.items() if sid == sys_id for c in cs]
        line = _no_spare_room(of_sys, req, price, what)
        meets = [c for c in of_sys if c.agg.feasible.any()]
        if line is not None:
            spare_lines.append(line)
            out.no_plan.append(line)
        elif meets:   # layouts meet the targets, none fits in the budget
            small = min(meets, key=lambda c: (c.gpus, c.nodes))
            out.no_plan.append(f"{sys_id}: no layout that meets the targets fits in {what}; the smallest, "
                               f"{small.label()}, needs {small.gpus} GPUs")
        else:
            out.no_plan += _no_plan(result, set(budgets) - {sys_id}, slo, model, None)
    if rows:
        return   # the recommendation explains itself
    if result.candidates and all(c.gpus > budgets[c.system.id] for c in result.candidates):
        smallest = min(result.candidates, key=lambda c: c.gpus)
        out.explanation = (f"No layout of {model.name} fits in {what}: the smallest that holds it needs "
                           f"{smallest.gpus} GPUs ({smallest.system.id} {smallest.label()}); give a larger budget.")
    elif spare_lines and len(spare_lines) == len(out.no_plan):
        out.explanation = (f"{what[:1].upper()}{what[1:]} cannot hold a serving replica beside N+{req.failover} "
                           "spares, though layouts fit and meet the SLOs: " + "; ".join(spare_lines) + ".")
    else:
        out.explanation = (f"No layout that fits in {what} meets {slo.describe()}"
                           + (f" with N+{req.failover} spares" if req.failover else "")
                           + (": " + "; ".join(out.no_plan + result.skipped) if out.no_plan or result.skipped
                              else "") + ".")


def _text(top: PlanOption, rows: list[PlanOption], what: str, slo: str) -> str:
    """The recommendation; with one output token per request (no request decodes: ``tpot_s`` and
    ``tokens_per_s_per_user`` None) it names no TPOT and no tokens/s per user."""
    pre = f"; prefill {top.prefill.layout} {top.xPyD}" if top.prefill is not None else ""
    user = "" if top.tokens_per_s_per_user is None else f", {top.tokens_per_s_per_user:.1f} tokens/s per user"
    text = (f"{what} of {top.system} carry {top.requests_per_s:.3g} requests/s ({top.output_tokens_per_s:,.0f} output "
            f"tokens/s, {top.output_tokens_per_s / max(top.rented_gpus, 1):,.0f} per GPU{user}) within {slo}: "
            f"{top.serving_replicas} x {top.layout}"
            f"{pre} ({top.precision}) at batch {top.batch:.0f} per {'decode ' if top.prefill else ''}replica"
            + (f", plus {top.spare_replicas} spare(s)" if top.spare_replicas else "")
            + f", TTFT {top.ttft_s * 1e3:.0f} ms" + ("" if top.tpot_s is None else f", TPOT {top.tpot_s * 1e3:.1f} ms"))
    if top.cost_per_hour is not None:
        text += f"; ${top.cost_per_hour:,.2f}/h, ${top.cost_per_mtok_out or 0.0:.2f} per million output tokens at that load"
    text += f". What binds: {top.binding} - {top.why}."
    if len(rows) > 1:
        r2 = rows[1]
        text += f" Next: {r2.system} {r2.layout} at {r2.requests_per_s:.3g} requests/s."
    if not top.speed_calibrated:
        text += f" Caution: {top.system}'s speed is extrapolated from its datasheet (no published measurement)."
    return text
