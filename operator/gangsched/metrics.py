"""Prometheus metrics in the text exposition format, served on `--metrics-port`.

A handful of counters and gauges need no client library: this keeps the image small and
the names stable. Gauges are read at scrape time from callbacks, never kept in sync by hand.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

Labels = tuple[tuple[str, str], ...]


@dataclass(slots=True)
class Metrics:
    cycles: int = 0
    engine_seconds_sum: float = 0.0
    engine_seconds_count: int = 0
    decisions: Counter[str] = field(default_factory=Counter)  # by reason
    binds: Counter[str] = field(default_factory=Counter)  # by outcome
    rollbacks: int = 0
    gauges: dict[str, tuple[str, Callable[[], float]]] = field(default_factory=dict)

    def gauge(self, name: str, help_text: str, read: Callable[[], float]) -> None:
        self.gauges[name] = (help_text, read)

    def render(self) -> str:
        lines: list[str] = []

        def metric(name: str, kind: str, help_text: str, samples: list[tuple[Labels, float]]) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            for labels, value in samples:
                rendered = ",".join(f'{k}="{v}"' for k, v in labels)
                lines.append(f"{name}{{{rendered}}} {value:g}" if rendered else f"{name} {value:g}")

        metric("gangsched_cycles_total", "counter", "Scheduling cycles run.", [((), self.cycles)])
        metric(
            "gangsched_engine_seconds",
            "summary",
            "Time the placement engine took per cycle.",
            [],
        )
        lines.append(f"gangsched_engine_seconds_sum {self.engine_seconds_sum:g}")
        lines.append(f"gangsched_engine_seconds_count {self.engine_seconds_count}")
        metric(
            "gangsched_decisions_total",
            "counter",
            "Group decisions by reason (Scheduled, Unschedulable, WaitingForPods, PodGroupNotFound).",
            [((("reason", r),), n) for r, n in sorted(self.decisions.items())],
        )
        metric(
            "gangsched_binds_total",
            "counter",
            "Pod bindings by outcome (Bound, Conflict, Gone, Failed).",
            [((("outcome", o),), n) for o, n in sorted(self.binds.items())],
        )
        metric(
            "gangsched_rollbacks_total",
            "counter",
            "Partial gangs rolled back after their timeout.",
            [((), self.rollbacks)],
        )
        for name, (help_text, read) in sorted(self.gauges.items()):
            metric(name, "gauge", help_text, [((), float(read()))])
        return "\n".join(lines) + "\n"


async def serve(metrics: Metrics, *, port: int, host: str = "0.0.0.0") -> web.AppRunner:
    """Serve GET /metrics until the returned runner is cleaned up."""

    async def handle(_: web.Request) -> web.Response:
        return web.Response(text=metrics.render(), content_type="text/plain", charset="utf-8")

    app = web.Application()
    app.router.add_get("/metrics", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
