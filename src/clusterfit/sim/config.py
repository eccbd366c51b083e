"""The ``simulation:`` section of a scenario file, as pydantic models.

Every field carries its unit in its name (``_s`` seconds, ``_rps`` requests per second, ``tokens``).
Only what the simulation needs lives here; the model, system, precision, layout, workload lengths and
SLOs come from the rest of the scenario (or the CLI) and are passed in separately.
"""

from __future__ import annotations

import math
from typing import Any, Literal, get_args

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from ..inputs import RefuseBool
from ..schema import (MAX_CLIENTS, MAX_RATE_RPS, MAX_REPLICAS, MAX_REQUESTS, MAX_SIM_TIME_S, MAX_THINK_TIME_S,
                      MAX_TOKENS, MIN_LOAD)
from ..speculative import MAX_DRAFT_TOKENS, SpeculativeMethod

#: Keys of ``simulation.replica`` renamed to vLLM's engine-argument names: old -> new.
RENAMED_REPLICA_KEYS = {"max_batch": "max_num_seqs", "token_budget": "max_num_batched_tokens"}

POLICIES = ("round_robin", "random", "least_outstanding", "least_kv", "power_of_two", "affinity")


def check_policy(policy: str) -> str:
    """``policy`` when it names a load-balancing policy of POLICIES, else a ParameterError naming the field (the one
    check behind simulate, twin, bench and the balancer)."""
    if policy not in POLICIES:
        from ..errors import ParameterError

        raise ParameterError("policy", f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
    return policy


class _Strict(RefuseBool):
    model_config = ConfigDict(extra="forbid")


class SampledLengthSpec(_Strict):
    """A token-length distribution.

    fixed: always ``value``. lognormal: mean ``mean`` tokens and coefficient of variation ``cv``.
    empirical: draw from ``values`` with optional ``weights``. Draws are clipped to [min, max].
    """

    dist: Literal["fixed", "lognormal", "empirical"] = "fixed"
    value: int | None = Field(default=None, ge=1, le=MAX_TOKENS)
    mean: float | None = Field(default=None, gt=0, le=MAX_TOKENS)
    cv: float = Field(default=1.0, ge=0, le=100)
    values: list[int] | None = None
    weights: list[float] | None = None
    min: int = Field(default=1, ge=1)
    max: int | None = Field(default=None, ge=1, le=MAX_TOKENS)

    @model_validator(mode="after")
    def _check(self) -> "SampledLengthSpec":
        if self.dist == "fixed" and self.value is None:
            raise ValueError("fixed lengths need `value`")
        if self.dist == "lognormal" and self.mean is None:
            raise ValueError("lognormal lengths need `mean`")
        if self.dist == "empirical":
            if not self.values:
                raise ValueError("empirical lengths need `values`")
            if any(not 1 <= v <= MAX_TOKENS for v in self.values):
                raise ValueError(f"empirical lengths must be in 1..{MAX_TOKENS:,} tokens")
            w = self.weights
            if w is not None and (len(w) != len(self.values) or any(not 0 <= x < math.inf for x in w)
                                  or not 0 < sum(w) < math.inf):
                raise ValueError("`weights` must be as long as `values`, finite, non-negative, not all zero")
        return self


#: The arrival processes the simulator generates (ArrivalSpec.process).
ArrivalProcess = Literal["poisson", "gamma", "mmpp", "diurnal"]
ARRIVAL_PROCESSES: tuple[str, ...] = get_args(ArrivalProcess)


class ArrivalSpec(_Strict):
    """How requests (or sessions) arrive.

    Open loop, at ``rate_rps`` whatever the replicas do: poisson: exponential gaps. gamma: gamma gaps with
    coefficient of variation ``cv`` (cv > 1 is bursty). mmpp: a two-state Markov-modulated Poisson process spending
    ``burst_fraction`` of the time at ``burst_factor`` x the mean rate (``rate_rps``; sim.requests._mmpp), mean
    dwell ``dwell_s`` in the burst state, with the same long-run mean ``rate_rps``. diurnal: rate_rps x (1 +
    amplitude x sin(2 pi t / period_s)).

    Closed loop, ``concurrency`` instead of ``rate_rps``: that many clients, each sending its next request (or its
    session's next turn) when its last one ends, ``think_time_s`` later (sessions' turns: the sessions' think time),
    the first ones spread over ``ramp_s``; the rate follows from the replicas' speed (sim.clients). Not for
    disaggregated pools.
    """

    process: ArrivalProcess = "poisson"
    rate_rps: float | None = Field(default=None, ge=MIN_LOAD, le=MAX_RATE_RPS)
    concurrency: int | None = Field(default=None, ge=1, le=MAX_CLIENTS, description=(
        "closed loop: clients, each sending its next request when its last one ends (instead of rate_rps)"))
    think_time_s: float = Field(default=0.0, ge=0, le=MAX_THINK_TIME_S, description=(
        "closed loop: a client's wait between an answer and its next request or session, seconds"))
    ramp_s: float | None = Field(default=None, ge=0, le=MAX_SIM_TIME_S, description=(
        "closed loop: the clients' first requests go out evenly spread over this many seconds; 0: all at once (as "
        "a benchmark client holding --max-concurrency); None: over about one request's time in the system and its "
        "think time (sim.cluster estimates it), as users who began at random"))
    cv: float = Field(default=2.0, gt=0, le=100)
    burst_factor: float = Field(default=4.0, ge=1)
    burst_fraction: float = Field(default=0.1, gt=0, lt=1)
    dwell_s: float = Field(default=10.0, gt=0, le=MAX_SIM_TIME_S)
    period_s: float = Field(default=86400.0, gt=0, le=MAX_SIM_TIME_S)
    amplitude: float = Field(default=0.5, ge=0, le=1)

    @model_validator(mode="after")
    def _one_loop(self) -> "ArrivalSpec":
        """A rate and a client count are two loads; an open loop's shape means nothing to a closed one (a value
        other than the default is refused: a dumped spec parses again). A think time or ramp without concurrency
        may still time the closed loop of a scenario's concurrent sessions (checked when the run is set up:
        closed_loop_timing)."""
        if self.concurrency is None:
            return self
        if self.rate_rps is not None:
            raise PydanticCustomError("two_loads", "give rate_rps (an open loop) or concurrency (a closed loop), "
                                      "not both")
        shaped = self.open_loop_shape()
        if shaped:
            raise PydanticCustomError("open_loop_only", f"{', '.join(shaped)} shape{'s' if len(shaped) == 1 else ''} "
                                      "open-loop arrivals; a closed loop (concurrency) sends a request as one ends")
        return self

    def open_loop_shape(self) -> list[str]:
        """The fields of an open loop's arrival process given other than their defaults."""
        return self._not_default(OPEN_LOOP_FIELDS)

    def closed_loop_timing(self) -> list[str]:
        """The closed loop's timing fields given other than their defaults (meaningless in an open loop)."""
        return self._not_default(("think_time_s", "ramp_s"))

    def _not_default(self, names: tuple[str, ...]) -> list[str]:
        fields = type(self).model_fields
        return [k for k in names if getattr(self, k) != fields[k].default]


#: The ArrivalSpec fields of an open loop's arrival process (refused beside ``concurrency``), in field order.
OPEN_LOOP_FIELDS = ("process", "cv", "burst_factor", "burst_fraction", "dwell_s", "period_s", "amplitude")


class SessionSpec(_Strict):
    """Multi-turn agent sessions: sessions arrive by the arrival process, each has a geometric number
    of turns (mean ``turns_mean``), turns ``think_time_s`` apart (open loop; in a closed loop, a turn goes out
    ``think_time_s`` after the previous turn's answer). Turn k+1's prompt is turn
    k's prompt and answer plus ``new_tokens`` new tokens, so it shares that prefix. ``turns`` fixes
    the number of turns instead; ``shared_prefix_tokens`` (a system prompt) starts every first turn."""

    # at most one simulation's requests (a longer session is never finished); a prefix at most a request's tokens
    turns_mean: float = Field(default=4.0, ge=1, le=MAX_REQUESTS)
    turns: int | None = Field(default=None, ge=1, le=MAX_REQUESTS)
    shared_prefix_tokens: int = Field(default=0, ge=0, le=MAX_TOKENS)
    think_time_s: float = Field(default=10.0, ge=0, le=MAX_THINK_TIME_S)
    new_tokens: SampledLengthSpec = SampledLengthSpec(dist="lognormal", mean=200, cv=1.0)


class SpeculativeSpec(_Strict):
    """Speculative decoding (clusterfit.speculative): ``draft_tokens`` proposals per step (vLLM
    ``num_speculative_tokens``; SGLang ``--speculative-num-steps`` with ``--speculative-eagle-topk 1``), each accepted
    with probability ``acceptance`` independently, so a step yields (1 - a^(k+1)) / (1 - a) tokens per sequence.
    ``acceptance_length`` gives that yield instead (the mean accepted tokens per step an engine reports, bonus token
    included); with neither, ``speculative.DEFAULT_ACCEPTANCE`` (0.7, cited there). ``method``: the drafter (mtp,
    eagle, eagle3: one decoder layer + LM head per draft token; ngram: prompt lookup on the CPU). ``draft_cost``: the
    drafter's time per draft token as a fraction of a target decode step; None derives it from the model
    (speculative.draft_cost_fraction) where the model is known (``clusterfit simulate``, the Python API); a step
    model simulated directly needs it given."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: SpeculativeMethod = "mtp"
    draft_tokens: int = Field(default=3, ge=1, le=MAX_DRAFT_TOKENS)
    acceptance: float | None = Field(default=None, ge=0, lt=1)
    acceptance_length: float | None = Field(default=None, ge=1)
    draft_cost: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _check(self) -> "SpeculativeSpec":
        if self.acceptance is not None and self.acceptance_length is not None:
            raise ValueError("give `acceptance` or `acceptance_length`, not both")
        if self.acceptance_length is not None and self.acceptance_length > self.draft_tokens + 1:
            raise ValueError(f"`acceptance_length` {self.acceptance_length:g} is more than draft_tokens + 1 "
                             f"({self.draft_tokens + 1}) tokens per step")
        return self

    @property
    def alpha(self) -> float:
        """The per-draft-token acceptance: given, from the acceptance length, or the default."""
        from ..speculative import DEFAULT_ACCEPTANCE, acceptance_for_length

        if self.acceptance is not None:
            return self.acceptance
        if self.acceptance_length is not None:
            return acceptance_for_length(self.draft_tokens, self.acceptance_length)
        return DEFAULT_ACCEPTANCE

    def drafting(self) -> Any:
        """This spec as clusterfit.speculative.Drafting; the draft cost must be known (given, or ``for_model``)."""
        from ..errors import ClusterfitError
        from ..speculative import Drafting

        if self.draft_cost is None:
            raise ClusterfitError("simulation.replica.speculative.draft_cost: give the drafter's cost per draft token "
                                  "(a fraction of a decode step), or simulate through clusterfit.simulate, which "
                                  "derives it from the model")
        return Drafting(self.method, self.draft_tokens, self.alpha, self.draft_cost)

    def for_model(self, model: Any, head: Any = None) -> "SpeculativeSpec":
        """This spec with ``draft_cost`` derived from ``model`` (a ModelArch) and the EAGLE head the user described
        (``head``, a speculative.DraftHead; None: one target layer + LM head) when it is not given."""
        if self.draft_cost is not None:
            return self
        from ..speculative import draft_cost_fraction

        return self.model_copy(update={"draft_cost": draft_cost_fraction(model, self.method, head)})


class ReplicaSpec(_Strict):
    """The engine's scheduler on one replica.

    max_num_seqs: most sequences running at once (vLLM's name; default: the step model's ``max_num_seqs``).
    max_num_batched_tokens: most tokens (prefill chunks + decode tokens) per step (vLLM's name; default:
        the step model's engine ``max_num_batched_tokens`` x its attention-DP ranks, else 8192).
    block_size: KV block size, tokens. watermark: share of KV blocks kept free at admission.
    max_queue: most requests waiting on a replica; beyond it arrivals are rejected (None: unbounded).
    """

    max_num_seqs: int | None = Field(default=None, ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=16)
    block_size: int = Field(default=16, ge=1)
    watermark: float = Field(default=0.01, ge=0, lt=1)
    prefix_cache: bool = True
    max_queue: int | None = Field(default=None, ge=1)
    speculative: SpeculativeSpec | None = None

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, data: Any) -> Any:
        """Name the new key for a key renamed to vLLM's spelling instead of calling it unknown."""
        if isinstance(data, dict):
            for old, new in RENAMED_REPLICA_KEYS.items():
                if old in data:
                    raise PydanticCustomError("renamed_key", "{old} was renamed {new} (vLLM's name)",
                                              {"old": old, "new": new})
        return data


class FailureSpec(_Strict):
    """A replica (``replica``) or a whole node (``node``) lost at ``at_s``; back after ``restart_s``
    (None: never). Requests in flight on it are retried on other replicas."""

    at_s: float = Field(ge=0, le=MAX_SIM_TIME_S)
    replica: int | None = Field(default=None, ge=0)
    node: int | None = Field(default=None, ge=0)
    restart_s: float | None = Field(default=None, ge=0, le=MAX_SIM_TIME_S)

    @model_validator(mode="after")
    def _one(self) -> "FailureSpec":
        if (self.replica is None) == (self.node is None):
            raise ValueError("a failure names exactly one of `replica` or `node`")
        return self


class AutoscaleSpec(_Strict):
    """Every ``interval_s``: if mean outstanding requests per live replica exceeds ``up_outstanding``
    add a replica (ready after ``startup_s``); below ``down_outstanding`` drain one (cluster.Cluster._tick). Bounded
    by [min_replicas, max_replicas], which the simulation's ``replicas`` must start within. ``up_outstanding`` must
    exceed ``down_outstanding``: a mean at or between them would both add and drain, one tick after another."""

    interval_s: float = Field(default=10.0, ge=1e-3, le=MAX_SIM_TIME_S)
    up_outstanding: float = Field(default=32.0, gt=0)
    down_outstanding: float = Field(default=2.0, ge=0, validate_default=True)   # checked against up_outstanding
    min_replicas: int = Field(default=1, ge=1, le=4096)
    max_replicas: int = Field(default=64, ge=1, le=4096)
    startup_s: float = Field(default=60.0, ge=0, le=MAX_SIM_TIME_S)

    @field_validator("down_outstanding")
    @classmethod
    def _below_up(cls, down: float, info: ValidationInfo) -> float:
        """Cluster._tick adds a replica while the mean outstanding requests per replica is above up_outstanding and
        drains one while it is below down_outstanding: with down >= up, a mean between them (or either side of
        equal thresholds) adds a replica, which lowers the mean below down, which drains it: the cluster flaps."""
        up = info.data.get("up_outstanding")
        if up is not None and down >= up:
            raise PydanticCustomError("autoscale_flaps", f"{down:g} must be below up_outstanding ({up:g}): the "
                                      "autoscaler adds a replica above up_outstanding and drains one below "
                                      "down_outstanding, so with these it would add and drain in turn (flapping)")
        return down

    @model_validator(mode="after")
    def _ordered(self) -> "AutoscaleSpec":
        if self.min_replicas > self.max_replicas:
            raise PydanticCustomError("autoscale_bounds", f"min_replicas ({self.min_replicas}) exceeds max_replicas "
                                      f"({self.max_replicas})")
        return self


class SimulationConfig(_Strict):
    """The ``simulation:`` section of a scenario file.

    requests: how many to simulate (default 10,000 generated; a trace is used whole unless given).
    arrival / input / output / sessions override the scenario's workload; ``trace`` replaces it.
    slo_ttft_s / slo_tpot_s override the scenario's SLOs, slo_ttft_percentile / slo_tpot_percentile (default 90)
    the percentiles judged and slo_min_goodput (default 0.9) the least share of requests within both.
    exact_steps: call the step model every step instead of interpolating its tables (slow; for checking).
    """

    replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    requests: int | None = Field(default=None, ge=1, le=MAX_REQUESTS)
    seed: int = Field(default=0, ge=0, le=2**32 - 1)
    policy: Literal["round_robin", "random", "least_outstanding", "least_kv", "power_of_two",
                    "affinity"] = "least_outstanding"
    arrival: ArrivalSpec = ArrivalSpec()
    input: SampledLengthSpec | None = None
    output: SampledLengthSpec | None = None
    sessions: SessionSpec | None = None
    trace: str | None = Field(default=None, min_length=1)
    replica: ReplicaSpec = ReplicaSpec()
    failures: list[FailureSpec] = []
    autoscale: AutoscaleSpec | None = None
    max_retries: int = Field(default=3, ge=0)
    window_s: float | None = Field(default=None, gt=0)
    gpus_per_node: int | None = Field(default=None, ge=1)
    slo_ttft_s: float | None = Field(default=None, gt=0)
    slo_tpot_s: float | None = Field(default=None, gt=0)
    slo_ttft_percentile: float | None = Field(default=None, ge=50, lt=100)
    slo_tpot_percentile: float | None = Field(default=None, ge=50, lt=100)
    slo_min_goodput: float | None = Field(default=None, ge=0, le=1)
    exact_steps: bool = False

    @model_validator(mode="before")
    @classmethod
    def _start_at_min_replicas(cls, data: Any) -> Any:
        """Without ``replicas`` an autoscaled simulation starts at autoscale.min_replicas (not at 1, below its
        minimum); sim.api starts it at the planned replica count within the bounds instead when it plans one."""
        if isinstance(data, dict) and "replicas" not in data and isinstance(data.get("autoscale"), dict):
            low = data["autoscale"].get("min_replicas")
            if isinstance(low, int) and not isinstance(low, bool) and low >= 1:
                data = {**data, "replicas": low}
        return data

    @field_validator("autoscale")
    @classmethod
    def _replicas_within_bounds(cls, spec: AutoscaleSpec | None, info: ValidationInfo) -> AutoscaleSpec | None:
        """The simulation starts with ``replicas`` replicas; the autoscaler only adds one above the load threshold
        and drains one down to min_replicas, so a start outside [min_replicas, max_replicas] would run below the
        minimum (or above the maximum) until the load moved it."""
        replicas = info.data.get("replicas")
        if spec is not None and replicas is not None and not spec.min_replicas <= replicas <= spec.max_replicas:
            raise PydanticCustomError("autoscale_start", f"replicas ({replicas}) is outside [min_replicas, "
                                      f"max_replicas] = [{spec.min_replicas}, {spec.max_replicas}]: the simulation "
                                      "starts with `replicas` replicas (min_replicas unless given); give replicas "
                                      "within the bounds")
        return spec
