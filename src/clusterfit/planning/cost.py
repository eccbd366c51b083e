"""Cost of a plan and the comparison with a per-token endpoint.

Units: prices in $/GPU-hour; plan cost in $/hour and $/month; token prices in $ per million tokens
($/Mtok); loads in requests/s (whole cluster) unless the name says otherwise.

Renting is per node unless the price quote says the provider rents single GPUs (``rent_unit: gpu`` in the
catalog, or a quote for a 1-GPU instance): replicas smaller than a node are packed onto nodes, and the plan pays
for whole nodes (``nodes x gpus_per_node``) or, per GPU, for the GPUs its replicas use.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from ..errors import ClusterfitError, ParameterError, brief, unknown
from ..hardware import MAX_USD_PER_GPU_HOUR, HardwareCatalog, load_hardware, load_prices, normalize_name
from .layout_candidates import sorted_unique

HOURS_PER_MONTH = 730.0  # 365 x 24 / 12

_PRICES_FILE = Path(__file__).resolve().parent.parent / "catalog" / "prices.yaml"


@dataclass(frozen=True)
class GpuHourPrice:
    """An indicative rental price for one GPU of a system, $/GPU-hour, with where it came from."""

    usd_per_gpu_hour: float
    source: str
    date: str | None = None
    kind: str = ""
    rent_unit: str = "node"   # "gpu": single GPUs are rented at this price; "node": whole nodes

    def describe(self) -> str:
        when = f", {self.date}" if self.date else ""
        unit = "rented per GPU" if self.rent_unit == "gpu" else "rented per node"
        return f"${self.usd_per_gpu_hour:.2f}/GPU-h, {unit} ({self.source}{when})"


#: Highest endpoint price taken, $ per million tokens (input or output).
MAX_USD_PER_MTOK = 10_000.0


@dataclass(frozen=True)
class EndpointPrice:
    """A per-token API endpoint: $ per million input tokens and per million output tokens."""

    input_per_mtok: float
    output_per_mtok: float

    def __post_init__(self) -> None:
        if not (0 <= self.input_per_mtok <= MAX_USD_PER_MTOK and 0 <= self.output_per_mtok <= MAX_USD_PER_MTOK):
            raise ClusterfitError(f"endpoint prices must be in 0..{MAX_USD_PER_MTOK:,.0f} $/Mtok, got in="
                                  f"{self.input_per_mtok:g}, out={self.output_per_mtok:g}")
        if self.input_per_mtok == 0 and self.output_per_mtok == 0:   # a free endpoint wins every comparison
            raise ClusterfitError("endpoint prices are both 0: give the endpoint's $ per million input and output "
                                  "tokens (in=0.6,out=2.2)")

    @classmethod
    def parse(cls, text: str) -> EndpointPrice:
        """Parse ``in=0.6,out=2.2`` ($/Mtok), the request's ``endpoint_price``: errors are ParameterErrors naming
        it (the CLI says ``--endpoint-price``, HTTP ``endpoint_price``)."""
        def refused(problem: str) -> ParameterError:
            return ParameterError("endpoint_price", problem)

        vals: dict[str, float] = {}
        for part in text.split(","):
            key, sep, val = part.partition("=")
            key = key.strip().lower()
            if not sep or key not in ("in", "out", "input", "output"):
                raise refused(f"expects in=$/Mtok,out=$/Mtok (e.g. in=0.6,out=2.2), got {brief(text)}")
            side = key[:2] if key.startswith("in") else "out"
            if side in vals:
                raise refused(f"gives {side}= twice (got {brief(text)})")
            try:
                vals[side] = float(val.strip().lstrip("$"))
            except ValueError:
                raise refused(f"{brief(val)} is not a number") from None
        if set(vals) != {"in", "out"}:
            raise refused(f"needs both in= and out= (got {brief(text)})")
        try:
            return cls(vals["in"], vals["out"])
        except ClusterfitError as exc:
            raise refused(str(exc)) from None

    def usd_per_request(self, isl_tokens: float, osl_tokens: float) -> float:
        """$ for one request of ``isl_tokens`` in and ``osl_tokens`` out."""
        return (isl_tokens * self.input_per_mtok + osl_tokens * self.output_per_mtok) / 1e6

    def cost_per_hour(self, requests_per_s: float, isl_tokens: float, osl_tokens: float) -> float:
        """$/hour the endpoint charges at a steady load."""
        return requests_per_s * 3600.0 * self.usd_per_request(isl_tokens, osl_tokens)


class PriceOverrides(dict[str, float]):
    """$/GPU-hour overrides by catalog id (a system's or a GPU's), with where each came from (``sources``: id ->
    '--price' or "the scenario's cost.prices"), which resolve_price's label says."""

    def __init__(self, prices: dict[str, float] | None = None, source: str = "--price") -> None:
        super().__init__(prices or {})
        self.sources = dict.fromkeys(self, source)


def _parse_price_items(items: list[str] | None) -> list[tuple[str, float, str]]:
    """``--price system=$/h`` options as (name, $/GPU-hour, the item as given), in order."""
    out = []
    for item in items or []:
        key, sep, val = item.partition("=")
        try:
            price = float(val.strip().lstrip("$").removesuffix("/h"))
        except ValueError:
            price = float("nan")
        if not sep or not key.strip() or not 0 < price <= MAX_USD_PER_GPU_HOUR:
            raise ParameterError("prices", f"expects SYSTEM=$/GPU-hour with a price in (0, "
                                 f"{MAX_USD_PER_GPU_HOUR:,.0f}] (e.g. hgx_h200=3.5), got {item!r}")
        out.append((key.strip(), price, item))
    return out


def parse_price_overrides(items: list[str] | None, hardware: HardwareCatalog | None = None) -> PriceOverrides:
    """``--price system=$/h`` options as {catalog id: $/GPU-hour} (canonical_prices: a name must be a system or a
    GPU of ``hardware``, the built-in catalog by default; one system priced twice is refused)."""
    pairs = _parse_price_items(items)
    return canonical_prices(pairs, hardware or load_hardware(),
                            lambda key, problem: ParameterError("prices", problem))


def canonical_prices(prices: list[tuple[str, float, str]], hardware: HardwareCatalog,
                     error: Callable[[str, str], Exception], source: str = "--price") -> PriceOverrides:
    """``prices`` ((name, $/GPU-hour, as given) from one source) keyed by the catalog's ids: a price must name a
    system or a GPU of the catalog (a typo would be silently ignored); a name ``--system`` takes (an alias, any
    case: 'h200', 'H200-SXM') is read as the id it stands for. An unknown name, or a system priced twice (its name
    twice, two aliases of it, or it and its GPU: which price won depended on the spelling), raises ``error(name,
    problem)`` (the option, or the scenario's field). The one check of prices given twice: by the id they resolve to
    (named as given when both spell it alike)."""
    known = set(hardware.systems) | {s.gpu.id for s in hardware.systems.values()}
    canonical: dict[str, float] = {}
    given: dict[str, tuple[str, str]] = {}   # catalog id -> (the name, the price as given)
    for key, price, item in prices:
        alias = normalize_name(key)
        name = key if key in known else hardware.system_aliases.get(alias) or hardware.gpu_aliases.get(alias)
        if name not in known:
            err = unknown("system", key, sorted(known))
            raise error(key, f"{err} (a price is given per system id or GPU id, $/GPU-hour)")
        if name in given:
            first, first_item = given[name]
            shown = first if key.lower() == first.lower() else name
            raise error(key, f"{shown} is priced twice ({first_item} and {item})")
        canonical[name] = price
        given[name] = (key, item)
    for system in hardware.systems.values():
        if system.id in given and system.gpu.id in given:
            raise error(system.id, f"{system.id} is priced twice ({given[system.id][1]}, and "
                        f"{given[system.gpu.id][1]} for its GPU, {system.gpu.id})")
    return PriceOverrides(canonical, source)


def merged_prices(scenario: PriceOverrides, options: PriceOverrides, hardware: HardwareCatalog) -> PriceOverrides:
    """The prices a plan bills: the options' over the scenario's. An option wins for every system it prices: a
    scenario's price of the same id is dropped, and so is a scenario's system price where the option prices the
    system's GPU (a scenario's GPU price under an option's system price stays for the GPU's other systems;
    resolve_price takes a system's own price first)."""
    gpu_of = {s.id: s.gpu.id for s in hardware.systems.values()}
    out = PriceOverrides()
    for key, price in scenario.items():
        if key not in options and gpu_of.get(key) not in options:
            out[key], out.sources[key] = price, scenario.sources[key]
    for key, price in options.items():
        out[key], out.sources[key] = price, options.sources[key]
    return out


def catalog_prices() -> dict[str, GpuHourPrice]:
    """Indicative $/GPU-hour per GPU id, from the hardware catalog (``load_prices``) and ``prices.yaml``.

    Per GPU the lowest current on-demand quote is taken (historic list prices and reservations are used
    only when nothing else is quoted); ``catalog/prices.yaml`` fills GPUs the hardware catalog lacks.
    """
    quotes: dict[str, list[GpuHourPrice]] = {}
    for gpu, price in _hardware_quotes() + _own_quotes():
        quotes.setdefault(gpu, []).append(price)
    return {gpu: min(ps, key=_preference) for gpu, ps in quotes.items()}


def _preference(p: GpuHourPrice) -> tuple[int, float]:
    kind = p.kind.lower()
    current_on_demand = "on-demand" in kind and "historic" not in kind
    return (0 if current_on_demand else 1, p.usd_per_gpu_hour)


def _hardware_quotes() -> list[tuple[str, GpuHourPrice]]:
    """The hardware catalog's price quotes that name a GPU, as (GPU id, price)."""
    out = []
    for q in load_prices():
        if not q.gpu_id:
            continue
        src = " ".join(x for x in (q.provider, q.instance) if x)
        src = f"{src}: {q.source}" if q.source else src
        out.append((q.gpu_id, GpuHourPrice(q.usd_per_gpu_hour, src, q.date, q.kind, q.rent_unit)))
    return out


NO_PUBLIC_PRICE = "no public on-demand price found"


@functools.lru_cache(maxsize=1)
def _own_file() -> dict:
    if not _PRICES_FILE.is_file():
        return {}
    return yaml.load(_PRICES_FILE.read_text(encoding="utf-8"),
                     Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}  # libyaml when present


def no_public_price_notes() -> dict[str, str]:
    """GPU id -> "no public on-demand price found (searched: ...)" for GPUs ``prices.yaml`` lists as unpriced."""
    return {str(q["gpu"]): f"{NO_PUBLIC_PRICE} (searched: {q.get('searched') or 'not stated'})"
            for q in _own_file().get("no_public_price", []) or []}


def _own_quotes() -> list[tuple[str, GpuHourPrice]]:
    data = _own_file()
    return [(str(q["gpu"]), GpuHourPrice(float(q["usd_per_gpu_hour"]), str(q["source"]), q.get("date"), str(q.get("kind", "")),
                          str(q.get("rent_unit", "node"))))
            for q in data.get("prices", [])]


def resolve_price(system_id: str, gpu_id: str, overrides: dict[str, float],
                  catalog: dict[str, GpuHourPrice]) -> GpuHourPrice | None:
    """The $/GPU-hour for a system: user override (by system id or GPU id) first, then the catalog.

    An override changes the price only: the system is rented as the catalog's quote for its GPU rents it (per GPU
    or whole nodes), and in whole nodes when the catalog has no quote for it.
    """
    quote = catalog.get(gpu_id)
    for key in (system_id, gpu_id):
        if key in overrides:
            unit = quote.rent_unit if quote is not None else "node"
            how = "rent unit of the catalog quote" if quote is not None else "no catalog quote: whole nodes"
            source = overrides.sources.get(key, "--price") if isinstance(overrides, PriceOverrides) else "--price"
            return GpuHourPrice(overrides[key], f"user override ({source}; {how})", rent_unit=unit)
    return quote


def usd_per_mtok(cost_per_hour_usd: float, tokens_per_s: float) -> float:
    """$ per million tokens when ``tokens_per_s`` tokens/s carry the whole hourly cost."""
    if tokens_per_s <= 0:
        return math.inf
    return cost_per_hour_usd / (tokens_per_s * 3600.0 / 1e6)


@dataclass(frozen=True)
class Pool:
    """Replicas of one kind in a plan: ``capacity_rps`` requests/s each, ``usd_per_hour`` each, k spares."""

    capacity_rps: float
    usd_per_hour: float
    spares: int = 0

    def cluster_cost_per_hour(self, requests_per_s: np.ndarray) -> np.ndarray:
        n = np.maximum(np.ceil(np.asarray(requests_per_s) / self.capacity_rps - 1e-9), 1)
        return (n + self.spares) * self.usd_per_hour


def break_even_rps(pools: list[Pool], endpoint_usd_per_request: float) -> float | None:
    """Smallest load (requests/s) from which a cluster sized for it costs no more than the endpoint.

    The cluster's cost is a staircase (whole replicas, N+k); the endpoint's is linear in load. Returns
    None when even a fully loaded cluster costs more per request than the endpoint.
    """
    e = endpoint_usd_per_request * 3600.0  # $/hour per request/s
    if e <= 0:
        return None
    marginal = sum(p.usd_per_hour / p.capacity_rps for p in pools)  # $/hour per request/s, fully loaded
    if e <= marginal * (1 + 1e-12):
        return None
    fixed = sum((p.spares + 1) * p.usd_per_hour for p in pools)
    lam_max = 2 * (fixed / (e - marginal) + max(p.capacity_rps for p in pools))
    bps = [np.arange(0, math.ceil(lam_max / p.capacity_rps) + 2) * p.capacity_rps for p in pools]
    edges = sorted_unique(np.concatenate(bps))
    if edges.size > 2_000_000:
        raise ClusterfitError("break-even search too large; check the endpoint price")
    lo, hi = edges[:-1], edges[1:]
    cost = sum(p.cluster_cost_per_hour(hi) for p in pools)  # constant on (lo, hi]
    cross = np.maximum(lo, cost / e)
    ok = (cross <= hi) & (cross > 0)
    if not ok.any():
        return None
    return float(cross[np.argmax(ok)])


def verdict(cluster_usd_per_hour: float, endpoint_usd_per_hour: float) -> str:
    """'cluster' when the cluster costs no more than the endpoint at this load, else 'endpoint'."""
    return "cluster" if cluster_usd_per_hour <= endpoint_usd_per_hour else "endpoint"
