"""What a published-measurement row states about its benchmark run: the run it belongs to, the request lengths its
client drew, how the requests arrived, and how many there were. Used by benchmarks/accuracy.py, which replays the
run through the simulator (clusterfit.sim) and reads the row's metric off the simulated requests.

Sources of the rules below (the benchmark clients the published rows name):
- vLLM `vllm bench serve` (vllm-project/vllm vllm/benchmarks/datasets.py @ 0056b87f, RandomDataset): random input /
  output lengths are integers drawn uniformly from [floor(L x (1 - r)), ceil(L x (1 + r))] (output low >= 1), r =
  --random-range-ratio, default 0.0 (fixed lengths). The legacy benchmarks/benchmark_serving.py (vLLM before the
  `vllm bench` CLI) drew from [int(L x r), L]. Requests are sent without ignore_eos unless --ignore-eos is given, so
  the outputs of a random run can stop early (the GPUStack pages then state the measured average output).
  ShareGPT: the first two turns of each conversation, pruned by vllm/benchmarks/dataset_utils.py is_valid_sequence
  (prompt and output >= 4 tokens, prompt <= 1024, prompt + output <= 2048).
- SGLang `python -m sglang.bench_serving` (sgl-project/sglang python/sglang/bench_serving.py @ 0033168f,
  sample_random_requests and the argument parser): input lengths uniform integers in [max(int(L x r), 1), L], output
  lengths in [int(O x r), O]; --random-range-ratio defaults to 0.0 (so lengths are uniform up to the stated
  maxima), --num-prompts to 1000, --request-rate to inf (all requests at t=0; a finite rate draws Poisson gaps);
  ignore_eos is on unless --disable-ignore-eos, so the drawn output lengths are generated in full.
- guidellm (the GPUStack 2026 pages): 'constant' profiles send requests at a fixed rate (evenly spaced), never more
  than GUIDELLM_MAX_CONCURRENCY (512) in flight; the GPUStack notes give the measured average input / output
  lengths of every run.
- A client with --max-concurrency C keeps at most C requests in flight: request j >= C is sent when the (j - C + 1)-th
  request finishes, and its TTFT / latency count from that send (vllm bench serve and sglang.bench_serving time each
  request from its own send).

ShareGPT's length *shape* is an assumption, not a measurement: a log-normal with coefficient of variation
SHAREGPT_CV (1.0), clipped to the client's filter and scaled so that the clipped mean equals the row's measured
average (the GPUStack and DataCrunch notes state it per run). Rows without a measured average use the mean of a
published run of the same client and dataset (SHAREGPT_DEFAULT_MEANS, with its source). benchmarks/accuracy.py
reports how much the ShareGPT rows move when the CV is halved or doubled, and ``--sharegpt-shape exponential``
replays them with an exponential of the same mean (CV 1 too, but 4.9% of answers under a twentieth of the mean
against 0.07%). Refitted both ways (benchmarks/results/fit-oss-*-sharegpt-exponential*.json, held out by source
page), the exponential helps SGLang (all runs 24.0% -> 23.0%, TPOT / ITL 32.4% -> 25.6%) and hurts vLLM (all
13.7% -> 14.1%, throughput 5.6% -> 9.0%); the shape is the dataset's, one for both engines, so the log-normal stays.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache

import numpy as np


class Skip(Exception):
    """A row the harness does not predict; the message is the reason reported in `coverage`."""


def read_rows(path: str) -> list[dict]:
    """Every row of a published-measurements CSV, as dicts keyed by the header (the file closed after reading)."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# ------------------------------------------------------------------------------------------------ runs
_BLOCK = re.compile(r"result block at line (\d+)")
_JSONL = re.compile(r"([\w./-]+\.jsonl) line (\d+)")
#: The columns that identify one configuration run (everything but the metric, its value and the notes, whose
#: wording names the column a metric was read from).
RUN_COLUMNS = ("model", "gpu", "num_gpus", "precision_weights", "precision_kv", "tp", "pp", "ep", "dp", "engine",
               "isl", "osl", "concurrency_or_mode")


def run_key(row: dict) -> str:
    """The run a row belongs to: one result block of one page. GPUStack rows name their block ("result block at line
    N"; the collection keeps a block printed twice once), the DataCrunch rows their raw JSONL line; other rows are
    one run per source file x configuration (RUN_COLUMNS), so the TTFT, TPOT and throughput a table prints for one
    configuration count once."""
    src = f"{row.get('source_repo_or_site', '')}|{row.get('source_path_or_title', '')}"
    notes = row.get("notes", "") or ""
    m = _BLOCK.search(notes)
    if m:
        return f"{src}|block {m.group(1)}"
    m = _JSONL.search(notes)
    if m:
        return f"{src}|{m.group(1)} line {m.group(2)}"
    return src + "|" + "|".join(str(row.get(k, "") or "") for k in RUN_COLUMNS)


#: Metric groups of the error tables: throughput (tokens or requests per second, any scope), TTFT, TPOT/ITL (per
#: token decode latency, including batch-1 decode speed, the inverse of TPOT) and end-to-end latency.
METRIC_GROUPS = (("e2e", ("e2e_",)), ("ttft", ("ttft_",)),
                 ("tpot_itl", ("tpot_", "itl_", "tokens_per_s_per_user", "decode_tokens_per_s_batch1")),
                 ("throughput", ("_per_s",)))


def metric_group(metric: str) -> str:
    for name, keys in METRIC_GROUPS:
        if any(metric.startswith(k) or (k.startswith("_") and k in metric) for k in keys):
            return name
    return "other"


#: Load regimes of the error tables. The issue's TTFT / TPOT targets are on request-rate rows.
LOAD_REGIMES = ("request_rate", "all_at_once", "closed_loop", "other")


def all_at_once(mode: str) -> bool:
    """Whether a load column (lower case) sends every request at once: max-throughput, offline and request-rate-inf
    runs (the load regime of the closed-form max-throughput prediction, and fit_intervals.py's queued TTFTs)."""
    return "max throughput" in mode or "inf" in mode or "all at once" in mode or "offline" in mode


def load_regime(row: dict) -> str:
    """The row's load regime (LOAD_REGIMES) from its load column, as arrival_of reads it: every request at once (a
    burst, or a rate the source itself calls "effectively all at once", or a max-throughput / offline table), a
    finite request rate, a closed loop at a concurrency (or a batch size), else other."""
    mode = (row.get("concurrency_or_mode", "") or "").lower()
    arrival = arrival_of(row)
    kind = arrival[0] if arrival is not None else None
    if kind == "burst" or "all at once" in mode or (kind is None and all_at_once(mode)):
        return "all_at_once"
    if kind in ("poisson", "constant"):
        return "request_rate"
    if kind == "closed" or "concurrency" in mode or "batch size" in mode or mode.startswith("batch "):
        return "closed_loop"
    return "other"


def by_metric_and_load(rows: list[dict], errs: dict[str, float]) -> dict[str, dict[str, dict]]:
    """Metric group -> load regime -> the run-weighted summary of the errors (% by row id) of ``rows``."""
    cells: dict[str, dict[str, list[dict]]] = {}
    for r in rows:
        if r["id"] in errs:
            cells.setdefault(metric_group(r["metric"]), {}).setdefault(load_regime(r), []).append(r)
    return {g: {reg: weighted_summary([errs[r["id"]] for r in by[reg]], run_weights(by[reg]))
                for reg in LOAD_REGIMES if reg in by} for g, by in sorted(cells.items())}


def run_weights(rows: list[dict]) -> list[float]:
    """1 / (rows of the same run among ``rows``): every run weighs 1 in total."""
    keys = [run_key(r) for r in rows]
    count: dict[str, int] = {}
    for k in keys:
        count[k] = count.get(k, 0) + 1
    return [1.0 / count[k] for k in keys]


def weighted_quantile(x: list[float] | np.ndarray, w: list[float] | np.ndarray, q: float) -> float:
    """The smallest x whose cumulative weight (x sorted) reaches q of the total: the lower weighted quantile."""
    x, w = np.asarray(x, float), np.asarray(w, float)
    order = np.argsort(x, kind="stable")
    cum = np.cumsum(w[order])
    i = int(np.searchsorted(cum, q * cum[-1] - 1e-12 * cum[-1]))
    return float(x[order][min(i, x.size - 1)])


def weighted_summary(errs: list[float], weights: list[float]) -> dict:
    """Run-weighted error summary (percent errors): each row weighs 1/(rows of its run), so a run counts once;
    median and p90 are lower weighted quantiles, mean APE and the bias (weighted median signed error) likewise."""
    e = np.asarray(errs, float)
    w = np.asarray(weights, float)
    a = np.abs(e)
    return {"n": int(e.size), "runs": round(float(w.sum()), 2),
            "median_ape": round(weighted_quantile(a, w, 0.5), 2),
            "mean_ape": round(float(np.sum(a * w) / np.sum(w)), 2),
            "median_signed_error": round(weighted_quantile(e, w, 0.5), 2),
            "p90_ape": round(weighted_quantile(a, w, 0.9), 2)}


# ------------------------------------------------------------------------------------------------ lengths
#: Assumed shape of ShareGPT lengths (see the module docstring).
SHAREGPT_CV = 1.0
#: Family of that shape: 'lognormal' (of CV SHAREGPT_CV) or 'exponential' (CV 1 by construction, far more short
#: answers: 4.9% of draws under a twentieth of the mean against 0.07% for the log-normal of CV 1).
SHAREGPT_SHAPE = "lognormal"
SHAREGPT_SHAPES = ("lognormal", "exponential")
#: ShareGPT (ShareGPT_V3_unfiltered_cleaned_split.json) mean input / output tokens for rows that state none:
#: sglang.bench_serving (ignore_eos: the dataset's answer lengths): DataCrunch h200-benchmarks
#: sglang/outputs/llama_3_3_70b_offline_output.jsonl line 7, 2,000 requests, Llama-3 tokenizer: 224.1 / 191.5;
#: vllm bench serve (stops at EOS): vllm-project/vllm PR #18566's example output, 1,000 prompts, Llama-3.1-8B-Instruct
#: tokenizer: 229,711 input / 203,068 generated tokens = 229.7 / 203.1.
SHAREGPT_DEFAULT_MEANS = {"sglang": (224.1, 191.5), "vllm": (229.7, 203.1)}
#: ShareGPT pruning of the vLLM / SGLang clients (vllm/benchmarks/dataset_utils.py is_valid_sequence): lengths >= 4,
#: prompt <= 1024, prompt + output <= 2048. guidellm does not prune; its draws are bounded by the served
#: --max-model-len of the GPUStack runs (32768).
SHAREGPT_FILTER = {"min": 4, "max_prompt": 1024, "max_total": 2048}
GUIDELLM_MAX_TOKENS = 32768
#: guidellm keeps at most this many requests in flight whatever the profile (vllm-project/guidellm
#: src/guidellm/settings.py @ 69ae2996, Settings.max_concurrency = 512, env GUIDELLM__MAX_CONCURRENCY); the GPUStack
#: notes of the rate-1000/s runs report the same "observed max concurrency 512". A faster rate queues in the client.
GUIDELLM_MAX_CONCURRENCY = 512
#: A log-normal of mean 1 and CV SHAREGPT_CV at these quantiles stands for the distribution when solving for the
#: scale that gives the clipped mean (deterministic, so the scale is the same for every seed).
_LN_GRID = (np.arange(4000) + 0.5) / 4000


@contextmanager
def sharegpt_shape(shape: str) -> Iterator[None]:
    """Replay the ShareGPT runs with lengths of family ``shape`` inside the block (a fit file records the family
    its constants were fitted with: fit_oss_engines.py's ``sharegpt_shape``)."""
    global SHAREGPT_SHAPE
    if shape not in SHAREGPT_SHAPES:
        raise ValueError(f"ShareGPT shape {shape!r}: choose from {', '.join(SHAREGPT_SHAPES)}")
    old, SHAREGPT_SHAPE = SHAREGPT_SHAPE, shape
    try:
        yield
    finally:
        SHAREGPT_SHAPE = old


def _lognormal_unit(cv: float, u: np.ndarray) -> np.ndarray:
    from scipy.stats import norm

    s2 = math.log1p(cv * cv)
    return np.exp(-s2 / 2 + math.sqrt(s2) * norm.ppf(u))


def _unit(dist: str, cv: float, u: np.ndarray) -> np.ndarray:
    """Mean-1 draws at uniform quantiles ``u``: a log-normal of CV ``cv``, or an exponential."""
    return -np.log1p(-np.asarray(u, float)) if dist == "exponential" else _lognormal_unit(cv, u)


@cache
def _clipped_scale(dist: str, cv: float, mean: float, low: int, high: int) -> float:
    """Bisection for LengthSpec.scale, once per shape: every seed of every replayed run draws from the same few."""
    x = _unit(dist, cv, _LN_GRID)
    lo, hi = 1e-3 * mean, 1e3 * mean
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        if float(np.mean(np.clip(mid * x, low, high))) < mean:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


@dataclass(frozen=True)
class LengthSpec:
    """Token lengths of a run's requests. fixed: always round(mean). uniform: integers in [low, high]. lognormal:
    coefficient of variation ``cv``, clipped to [low, high], scaled so that the clipped mean is ``mean``.
    ``source`` says where the numbers come from."""

    dist: str
    mean: float
    low: int = 1
    high: int = 1 << 30
    cv: float = 0.0
    source: str = ""

    @staticmethod
    def fixed(value: float, source: str) -> LengthSpec:
        v = max(1, int(round(value)))
        return LengthSpec("fixed", float(v), v, v, 0.0, source)

    @staticmethod
    def uniform(low: int, high: int, source: str) -> LengthSpec:
        low, high = max(1, int(low)), max(1, int(high))
        if low >= high:
            return LengthSpec.fixed(low, source)
        return LengthSpec("uniform", (low + high) / 2.0, low, high, 0.0, source)

    def scale(self) -> float:
        """lognormal / exponential: the multiplier of the mean-1 shape whose clipped draws average ``mean``."""
        return _clipped_scale(self.dist, self.cv, self.mean, self.low, self.high)

    def draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if self.dist == "fixed":
            return np.full(n, int(self.mean), np.int64)
        if self.dist == "uniform":
            return rng.integers(self.low, self.high + 1, size=n).astype(np.int64)
        x = self.scale() * _unit(self.dist, self.cv, rng.uniform(size=n))
        return np.clip(np.rint(x), self.low, self.high).astype(np.int64)


@dataclass(frozen=True)
class RunSpec:
    """A benchmark run to replay. arrival: 'burst' (every request at t=0), 'poisson' / 'constant' at ``rate``
    requests/s, or 'closed' (``concurrency`` requests in flight); a rate run with a ``concurrency`` sends each
    request at its arrival or when one of the client's ``concurrency`` slots frees, whichever is later.
    ``max_total``: prompt + output cap of the client's dataset filter (ShareGPT), else None. ``random``: whether the
    lengths are drawn (a fixed-length run with a deterministic arrival replays identically, so one seed suffices)."""

    client: str
    dataset: str
    arrival: str
    rate: float | None
    concurrency: int | None
    requests: int
    requests_source: str
    input: LengthSpec
    output: LengthSpec
    max_total: int | None = None

    @property
    def random(self) -> bool:
        return self.arrival == "poisson" or self.input.dist != "fixed" or self.output.dist != "fixed"

    def describe(self) -> str:
        load = {"burst": "all at t=0", "closed": f"closed loop, {self.concurrency} in flight"}.get(
            self.arrival) or f"{self.arrival} {self.rate:g}/s" + (
            f", at most {self.concurrency} in flight" if self.concurrency else "")
        return (f"{self.client} {self.dataset}, {self.requests} requests ({self.requests_source}), {load}; input "
                f"{self.input.dist} mean {self.input.mean:.1f} ({self.input.source}); output {self.output.dist} "
                f"mean {self.output.mean:.1f} ({self.output.source})")


def _num(s: str) -> float:
    return float(s.replace(",", ""))


def client_of(row: dict) -> str:
    """The benchmark client that produced the row: guidellm, sglang (sglang.bench_serving), vllm (vllm bench serve /
    benchmark_serving.py); otherwise the engine's own client."""
    text = f"{row.get('concurrency_or_mode', '')} {row.get('notes', '')}".lower()
    if "guidellm" in text:
        return "guidellm"
    if "bench_serving" in text:
        return "sglang"
    if "vllm bench" in text or "vllm-bench" in text or "benchmark_serving.py" in text:
        return "vllm"
    eng = (row.get("engine", "") or "").lower()
    return "sglang" if "sglang" in eng else "vllm" if "vllm" in eng else "other"


_COUNT_MODE = re.compile(r"(\d[\d,]*)\s+(?:prompts|requests)\b")
_COUNT_NOTES = (re.compile(r"--num-prompts?[\s=]+(\d[\d,]*)"), re.compile(r"over\s+(\d[\d,]*)\s+(?:successful|completed)"
                                                                          r"\s+requests"),
                re.compile(r"with\s+(\d[\d,]*)\s+requests"), re.compile(r"(\d[\d,]*)\s+requests at concurrency"))
#: The clients' default request counts (sglang.bench_serving --num-prompts 1000; vllm bench serve --num-prompts
#: 1000, vllm/benchmarks/serve.py).
DEFAULT_REQUESTS = {"sglang": 1000, "vllm": 1000}


def request_count(row: dict, client: str, concurrency: int | None) -> tuple[int, str]:
    """(requests, where the number comes from): the load column's 'N prompts/requests', the notes' --num-prompts /
    'over N successful requests' / 'with N requests', the client's default; a closed loop of unknown client and
    count: 10 x the concurrency (InferenceMAX's --num-prompts = 10 x concurrency)."""
    m = _COUNT_MODE.search((row.get("concurrency_or_mode", "") or "").lower())
    if m:
        return int(_num(m.group(1))), "load column"
    notes = (row.get("notes", "") or "").lower()
    for pat in _COUNT_NOTES:
        m = pat.search(notes)
        if m:
            return int(_num(m.group(1))), "notes"
    if client in DEFAULT_REQUESTS:
        return DEFAULT_REQUESTS[client], f"{client} client default"
    if concurrency:
        return 10 * concurrency, "10 x concurrency (count not stated)"
    raise Skip("request count of the run not stated")


_RATE = re.compile(r"request rate\s+(inf|[\d.]+)")
_CONC = re.compile(r"(?:^|[\s(,])(?:max(?:imum)?\s+)?concurrency\s+(\d[\d,]*)")
_OBSERVED = re.compile(r"observed (?:max(?:imum)?\s+)?concurrency\s+\d[\d,]*")
#: Load wordings the run replay does not model: a sweep's peak point, batch-size (offline engine) runs, and halves of
#: a disaggregated deployment.
_NOT_A_RUN = ("batch size", "peak", "pareto", "sweep", "prefill", "decode side", "decode-only", "decode:",
              "static batch", "max throughput", "simulated")


def arrival_of(row: dict) -> tuple[str, float | None, int | None] | None:
    """(arrival, rate, concurrency) of the row's load column, or None when it is no replayable run."""
    mode = (row.get("concurrency_or_mode", "") or "").lower()
    if any(k in mode for k in _NOT_A_RUN):
        return None
    m = _RATE.search(mode)
    if m:
        # a client cap beside the rate (vllm bench serve --max-concurrency), not the peak a source observed
        c = _CONC.search(_OBSERVED.sub("", mode))
        cap = int(_num(c.group(1))) if c else None
        if m.group(1) == "inf":
            return ("closed", None, cap) if cap else ("burst", None, None)
        return ("constant" if "constant" in mode else "poisson"), float(m.group(1)), cap
    if "all at once" in mode or "offline" in mode:
        return "burst", None, None
    m = _CONC.search(mode)
    if m:
        return "closed", None, int(_num(m.group(1)))
    return None


_MEASURED = re.compile(r"measured avg input ([\d.]+) / avg output ([\d.]+)")
_MEAN_WORDS = re.compile(r"mean ~?([\d.]+) in / ~?([\d.]+) out")
_TOTALS = re.compile(r"totals ([\d,]+) in / ([\d,]+) out")
_RANGE = re.compile(r"(?:--random-range-ratio|random_range_ratio|range ratio)[\s=]+([\d.]+)")
_MAXLEN = re.compile(r"random \(max (\d+) in / (\d+) out\)|random (\d+)/(\d+)")
_RIN = re.compile(r"--random-input(?:-len)?[\s=]+(\d+)")
_ROUT = re.compile(r"--random-output(?:-len)?[\s=]+(\d+)")


def measured_means(row: dict, requests: int) -> tuple[float, float] | None:
    """Mean input / output tokens the notes state for the run: 'measured avg input X / avg output Y', 'mean ~X in /
    ~Y out', or 'totals X in / Y out' over the run's requests."""
    notes = (row.get("notes", "") or "").lower()
    m = _MEASURED.search(notes) or _MEAN_WORDS.search(notes)
    if m:
        return float(m.group(1)), float(m.group(2))
    m = _TOTALS.search(notes)
    if m:
        return _num(m.group(1)) / requests, _num(m.group(2)) / requests
    return None


def _random_rule(client: str, legacy: bool, length: int, r: float, what: str, src: str) -> LengthSpec:
    if client == "sglang":
        low = max(int(length * r), 1)
        return LengthSpec.uniform(low, length, f"sglang.bench_serving random: uniform [{low}, {length}] ({src})")
    if legacy:
        low = int(length * r)
        return LengthSpec.uniform(low, length, f"benchmark_serving.py random: uniform [{low}, {length}] ({src})")
    low, high = math.floor(length * (1 - r)), math.ceil(length * (1 + r))
    return LengthSpec.uniform(max(low, 1), high, f"vllm bench random: uniform [{max(low, 1)}, {high}] ({src})")


def run_spec(row: dict) -> RunSpec | None:
    """The benchmark run a vLLM / SGLang row reports, or None when its load is no replayable run (batch-1 and
    batch-size rows, sweep peaks, disaggregated halves: the closed-form performance model predicts or skips those).
    Raises Skip when the run is one but its lengths are not known."""
    load = arrival_of(row)
    if load is None:
        return None
    arrival, rate, conc = load
    client = client_of(row)
    if client == "guidellm" and rate is not None and conc is None:
        conc = GUIDELLM_MAX_CONCURRENCY
    mode = (row.get("concurrency_or_mode", "") or "").lower()
    notes = (row.get("notes", "") or "").lower()
    text = f"{mode} ; {notes}"
    n, n_src = request_count(row, client, conc)
    isl, osl = _int(row.get("isl")), _int(row.get("osl"))
    measured = measured_means(row, n)
    msrc = "measured average in the notes"
    if "sonnet" in text:
        raise Skip("Sonnet dataset: lengths not stated")
    if "sharegpt" in text:
        if measured is None:
            if client not in SHAREGPT_DEFAULT_MEANS:
                raise Skip("ShareGPT run of an unknown client without measured lengths")
            measured, msrc = SHAREGPT_DEFAULT_MEANS[client], f"ShareGPT mean of a published {client} run"
        if client == "guidellm":
            lo, hi_in, hi_out, total = 1, GUIDELLM_MAX_TOKENS, GUIDELLM_MAX_TOKENS, GUIDELLM_MAX_TOKENS
        else:
            f = SHAREGPT_FILTER
            lo, hi_in, hi_out, total = f["min"], f["max_prompt"], f["max_total"] - f["min"], f["max_total"]
        shape = f"log-normal CV {SHAREGPT_CV:g}" if SHAREGPT_SHAPE == "lognormal" else SHAREGPT_SHAPE
        src = f"ShareGPT, {shape} (assumed shape), mean: {msrc}"
        return RunSpec(client, "sharegpt", arrival, rate, conc, n, n_src,
                       LengthSpec(SHAREGPT_SHAPE, measured[0], lo, hi_in, SHAREGPT_CV, src),
                       LengthSpec(SHAREGPT_SHAPE, measured[1], lo, hi_out, SHAREGPT_CV, src), total)
    # random / synthetic lengths
    m = _MAXLEN.search(mode)
    if m:
        isl, osl = int(m.group(1) or m.group(3)), int(m.group(2) or m.group(4))
    if isl is None:
        m = _RIN.search(notes)
        isl = int(m.group(1)) if m else None
    if osl is None:
        m = _ROUT.search(notes)
        osl = int(m.group(1)) if m else None
    if not isl or not osl:
        if measured is None:
            raise Skip("no isl/osl")
        isl, osl = isl or round(measured[0]), osl or round(measured[1])
    rm = _RANGE.search(text)
    r = float(rm.group(1)) if rm else 0.0
    legacy = "benchmark_serving.py" in text
    if "random" in text and client in ("sglang", "vllm") and (r > 0 or client == "sglang"):
        rsrc = f"range ratio {r:g}" + ("" if rm else f" ({client} default)")
        inp = _random_rule(client, legacy, isl, r, "input", rsrc)
        out = _random_rule(client, legacy, osl, r, "output", rsrc)
    elif "15% variance" in text or "±15%" in text:
        inp = LengthSpec.uniform(round(isl * 0.85), round(isl * 1.15), "±15% around the nominal length")
        out = LengthSpec.uniform(round(osl * 0.85), round(osl * 1.15), "±15% around the nominal length")
    else:
        inp = (LengthSpec.fixed(measured[0], msrc) if measured else LengthSpec.fixed(isl, "isl column"))
        out = LengthSpec.fixed(osl, "osl column")
    stops_early = client == "vllm" and "--ignore-eos" not in notes.replace("no --ignore-eos", "")
    if stops_early and measured is not None and abs(measured[1] - out.mean) > 0.5:
        # outputs stop at EOS before the requested length: the measured average is all the source gives
        out = LengthSpec.fixed(measured[1], msrc + " (outputs stop at EOS; where each stops is not published)")
    dataset = "random" if "random" in text else "fixed"
    return RunSpec(client, dataset, arrival, rate, conc, n, n_src, inp, out)


def _int(x) -> int | None:
    try:
        return int(float(x))
    except (TypeError, ValueError):
        return None
