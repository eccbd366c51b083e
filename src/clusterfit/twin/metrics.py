"""The twin's ``/metrics``: Prometheus text with vLLM's metric names, so that dashboards and autoscalers built for a
vLLM fleet read the twin unchanged.

Names, types, help texts and histogram buckets are vLLM's (vllm/v1/metrics/loggers.py, ``PrometheusStatLogger``;
listed at https://docs.vllm.ai/en/stable/usage/metrics/). vLLM labels each series with ``model_name`` and ``engine``
(the engine core index under data parallelism); the twin serves several replicas behind one endpoint and labels
each replica's series ``engine="<replica index>"``, so ``sum by (model_name)`` gives the endpoint's figures.

Scheduler state (running / waiting requests, KV usage, preemptions) is read from the simulated replicas when
Prometheus scrapes. Request timings are the simulated ones (seconds on the twin's clock), observed as vLLM observes
them: TTFT when the first token is produced, inter-token latency per output token, the phase histograms when a
request finishes (queue = arrival to its first prefill chunk in a step, vLLM's WAITING phase; prefill = that to the
first token; decode = first to last token; inference = first chunk to last token). Running and waiting are counted
as vLLM's scheduler counts them: a request runs from its first prefill chunk on.

One metric of the twin's own: ``clusterfit_twin_token_delivery_lag_seconds``, how long after its simulated emission
each token reached the HTTP layer (the event loop's lateness; on a loaded host it says how far the measured latencies
can be from the simulated ones).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

#: vLLM's buckets (vllm/v1/metrics/loggers.py): time to first token, inter-token latency, request phases, seconds.
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                  40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
                 80.0)
REQUEST_LATENCY_BUCKETS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                             240.0, 480.0, 960.0, 1920.0, 7680.0)
LAG_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
LABELS = ("model_name", "engine")


def one_two_five_buckets(max_value: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to ``max_value`` (vLLM's ``build_1_2_5_buckets`` for token-count histograms)."""
    out: list[int] = []
    scale = 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_value:
                return out
            out.append(m * scale)
        scale *= 10


class TwinMetrics:
    """The Prometheus registry of one twin. ``state`` is called at scrape time and returns, per replica, a mapping
    with ``running``, ``waiting``, ``kv_usage`` (0-1) and ``preemptions`` (cumulative)."""

    def __init__(self, model_name: str, replicas: int, max_model_len: int,
                 state: Callable[[], list[dict[str, float]]]) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        self._name = model_name
        self._state = state
        reg = self.registry

        def hist(name: str, doc: str, buckets: Any) -> list[Any]:
            h = Histogram(name, doc, LABELS, buckets=buckets, registry=reg)
            return [h.labels(model_name, str(i)) for i in range(replicas)]

        def counter(name: str, doc: str) -> list[Any]:
            c = Counter(name, doc, LABELS, registry=reg)
            return [c.labels(model_name, str(i)) for i in range(replicas)]

        tokens = one_two_five_buckets(max_model_len)
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        success = Counter("vllm:request_success", "Count of successfully processed requests.",
                          [*LABELS, "finished_reason"], registry=reg)
        self.success = [success.labels(model_name, str(i), "length") for i in range(replicas)]
        self.ttft = hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                         TTFT_BUCKETS_S)
        self.itl = hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                        ITL_BUCKETS_S)
        self.tpot = hist("vllm:request_time_per_output_token_seconds",
                         "Histogram of time_per_output_token_seconds per request.", ITL_BUCKETS_S)
        self.e2e = hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                        REQUEST_LATENCY_BUCKETS_S)
        self.queue = hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
                          REQUEST_LATENCY_BUCKETS_S)
        self.inference = hist("vllm:request_inference_time_seconds",
                              "Histogram of time spent in RUNNING phase for request.", REQUEST_LATENCY_BUCKETS_S)
        self.prefill = hist("vllm:request_prefill_time_seconds",
                            "Histogram of time spent in PREFILL phase for request.", REQUEST_LATENCY_BUCKETS_S)
        self.decode = hist("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
                           REQUEST_LATENCY_BUCKETS_S)
        self.prompt_len = hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens)
        self.generation_len = hist("vllm:request_generation_tokens", "Number of generation tokens processed.", tokens)
        self.max_tokens = hist("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.",
                               tokens)
        lag = Histogram("clusterfit_twin_token_delivery_lag_seconds", "Time from a token's simulated emission to "
                        "its hand-over to the HTTP layer (event-loop lateness).", ["model_name"],
                        buckets=LAG_BUCKETS_S, registry=reg)
        self.lag = lag.labels(model_name)
        reg.register(_SchedulerState(self))

    def render(self) -> tuple[bytes, str]:
        """The exposition (body, content type)."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _SchedulerState:
    """Gauges and the preemption counter, read from the simulated replicas at scrape time."""

    def __init__(self, metrics: TwinMetrics) -> None:
        self._m = metrics

    def describe(self) -> list[Any]:
        return []  # names are produced at collect time only

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        name = self._m._name
        rows = self._m._state()
        families = (
            (GaugeMetricFamily, "vllm:num_requests_running", "Number of requests in model execution batches.",
             "running"),
            (GaugeMetricFamily, "vllm:num_requests_waiting", "Number of requests waiting to be processed.", "waiting"),
            (GaugeMetricFamily, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
             "kv_usage"),
            (GaugeMetricFamily, "vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage."
             "DEPRECATED: Use vllm:kv_cache_usage_perc instead.", "kv_usage"),
            (CounterMetricFamily, "vllm:num_preemptions", "Cumulative number of preemption from the engine.",
             "preemptions"),
        )
        for cls, metric, doc, key in families:
            fam = cls(metric, doc, labels=list(LABELS))
            for i, row in enumerate(rows):
                fam.add_metric([name, str(i)], float(row[key]))
            yield fam
