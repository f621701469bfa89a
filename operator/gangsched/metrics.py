"""Prometheus metrics (prometheus-client), served on `--metrics-port` at /metrics.

What an operator of kube-scheduler looks for, under `gangsched_*` names: how long a gang
waits from its last pod created to its last pod bound (like
`scheduler_pod_scheduling_sli_duration_seconds`), how long the engine takes per cycle,
pending gangs by reason, bind outcomes, rollbacks, how far the cache lags behind our own
writes, and (leader election on) how late the Lease was renewed. Each operator has its own
registry (tests run several in one process); gauges that mirror the cache are read at scrape
time from callbacks, never kept in sync by hand.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gangsched.model import Reason

# Seconds: a gang of a few pods binds in tens of ms, a big one behind a busy queue in minutes.
_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
_ENGINE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
# Seconds: a renewal on time is late by its request's few ms; past the renew deadline (6 s by
# default) the fence refused writes meanwhile.
_LEASE_LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 6, 8, 15)


class _Callbacks(Collector):
    """Gauges read at scrape time."""

    def __init__(self) -> None:
        self.gauges: dict[str, tuple[str, Callable[[], float]]] = {}

    def collect(self) -> Iterator[Metric]:
        for name, (help_text, read) in sorted(self.gauges.items()):
            yield GaugeMetricFamily(name, help_text, value=float(read()))


class Metrics:
    """The operator's metrics; `render()` gives the text exposition."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.cycles = Counter("gangsched_cycles", "Scheduling cycles run.", registry=r)
        self.engine_seconds = Histogram(
            "gangsched_engine_cycle_duration_seconds",
            "Time the placement engine took per cycle.",
            buckets=_ENGINE_BUCKETS,
            registry=r,
        )
        self.decisions = Counter(
            "gangsched_decisions",
            "Group decisions by reason (Scheduled, Unschedulable, WaitingForPods, PodGroupNotFound).",
            ["reason"],
            registry=r,
        )
        self.pending_groups = Gauge(
            "gangsched_pending_groups",
            "Groups decided but not placed in the last cycle, by reason.",
            ["reason"],
            registry=r,
        )
        self.binds = Counter(
            "gangsched_binds",
            "Pod bindings by outcome (Bound, Conflict, Gone, Failed).",
            ["outcome"],
            registry=r,
        )
        self.rollbacks = Counter(
            "gangsched_rollbacks", "Partial gangs rolled back after their timeout.", registry=r
        )
        self.gang_latency = Histogram(
            "gangsched_gang_scheduling_duration_seconds",
            "From a group's last pod created to its last pod bound "
            "(as kube-scheduler's scheduler_pod_scheduling_sli_duration_seconds).",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.cache_lag = Histogram(
            "gangsched_cache_write_lag_seconds",
            "From a binding we sent to the watch showing that pod bound.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.preemptions = Counter(
            "gangsched_preemption_attempts",
            "Preemptions started for a group, by outcome (Started: every victim deleted or gone; "
            "Partial: some deletions failed).",
            ["outcome"],
            registry=r,
        )
        self.preemption_victims = Counter(
            "gangsched_preemption_victims",
            "Victim pods by outcome (Deleted, Gone, Failed).",
            ["outcome"],
            registry=r,
        )
        self._callbacks = _Callbacks()
        r.register(self._callbacks)

    def gauge(self, name: str, help_text: str, read: Callable[[], float]) -> None:
        """A gauge whose value is `read()` at scrape time."""
        self._callbacks.gauges[name] = (help_text, read)

    def lease_renewal_lag(self, lag_max: Callable[[], float]) -> Histogram:
        """The Lease keeper's metrics (only where leader election is on): the histogram each
        renewal's lag is observed into (from the elector's thread: `observe` is thread-safe),
        and the gauge of the largest lag since start, read from `lag_max()` at scrape time."""
        self.gauge(
            "gangsched_lease_renewal_lag_max_seconds",
            "The largest Lease renewal lag since start (see gangsched_lease_renewal_lag_seconds).",
            lag_max,
        )
        return Histogram(
            "gangsched_lease_renewal_lag_seconds",
            "How much later than planned each Lease renewal completed: its completion minus the "
            "previous renewal's completion plus the retry period, floored at 0.",
            buckets=_LEASE_LAG_BUCKETS,
            registry=self.registry,
        )

    def cycle_done(self, reasons: Iterable[Reason]) -> None:
        """Record the unplaced groups of one cycle by reason (every reason seen stays exported)."""
        tally = Tally(reasons)
        for reason in Reason:
            if reason not in (Reason.SCHEDULED, Reason.QUEUED):  # Queued is never decided
                self.pending_groups.labels(reason=reason.value).set(tally.get(reason, 0))

    def render(self) -> str:
        return generate_latest(self.registry).decode()


async def serve(
    metrics: Metrics, *, port: int, host: str = "0.0.0.0", debug: Callable[[], object] | None = None
) -> web.AppRunner:
    """Serve GET /metrics (and GET /debug/cache: what `debug()` returns, as JSON) until the
    returned runner is cleaned up."""

    async def handle(_: web.Request) -> web.Response:
        return web.Response(text=metrics.render(), content_type="text/plain", charset="utf-8")

    async def handle_debug(_: web.Request) -> web.Response:
        return web.json_response(debug() if debug is not None else {})

    app = web.Application()
    app.router.add_get("/metrics", handle)
    app.router.add_get("/debug/cache", handle_debug)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
