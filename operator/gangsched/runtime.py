"""Assemble and run the operator: API client, cache, binder, loop, kopf; startup to shutdown.

kopf runs cluster-wide whatever `--namespace` says: capacity accounting needs every bound
pod on every node. The namespace option limits which PodGroups and pods are scheduled.

Lifecycle (kopf's startup, probe and cleanup handlers are registered here, the watch
handlers in `handlers`): at startup the main task waits for the Lease when leader election
is on (a standby keeps its cache warm from the watches but never decides or writes),
primes the cache from consistent LISTs, then runs the loop. Losing the Lease fences the loop
and exits, so the Deployment restarts the replica as a standby.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import kopf
from aiohttp import web
from kopf._core.engines.peering import Identity  # kopf exports no public name for it
from kubernetes import client, config

from gangsched.binder import Binder
from gangsched.cluster import ClusterCache, LiveReader
from gangsched.handlers import register_watch_handlers
from gangsched.leader import LeaderElector, LeaseConfig, default_identity
from gangsched.loop import Scheduler, SchedulerConfig
from gangsched.metrics import Metrics, serve
from gangsched.model import LIVE_PODS_SELECTOR
from gangsched.transport import Transport

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RunOptions:
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    kubeconfig: str | None = None
    liveness_port: int | None = 8080
    metrics_port: int | None = None
    concurrency: int = 32
    log_format: str = "human"
    verbose: bool = False
    lease: LeaseConfig | None = None


def api_client(*, kubeconfig: str | None, pool: int) -> client.ApiClient:
    """In-cluster (service-account token) when running in a pod, else the kubeconfig."""
    configuration = client.Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, client_configuration=configuration
        )
    configuration.connection_pool_maxsize = pool
    return client.ApiClient(configuration)


@dataclass(slots=True)
class Operator:
    """The parts of one running operator."""

    api: client.ApiClient
    transport: Transport
    cache: ClusterCache
    live: LiveReader
    binder: Binder
    scheduler: Scheduler
    elector: LeaderElector | None

    @property
    def leading(self) -> bool:
        return self.elector is None or self.elector.leading


def assemble(options: RunOptions) -> Operator:
    api = api_client(kubeconfig=options.kubeconfig, pool=options.concurrency + 4)
    transport = Transport(api=api, concurrency=options.concurrency)
    cache = ClusterCache()
    live = LiveReader(cache=cache, transport=transport, scheduler_name=options.scheduler.scheduler_name)
    binder = Binder(
        transport=transport,
        bind_delay_seconds=options.scheduler.faults.bind_delay_seconds,
        instance=options.lease.identity if options.lease else default_identity(),
    )
    metrics = Metrics()
    cache.on_confirmed = metrics.cache_lag.observe
    scheduler = Scheduler(cache=cache, binder=binder, live=live, config=options.scheduler, metrics=metrics)
    elector = LeaderElector(api=api, config=options.lease) if options.lease else None
    return Operator(api, transport, cache, live, binder, scheduler, elector)


def _register_gauges(op: Operator) -> None:
    metrics, cache = op.scheduler.metrics, op.cache
    metrics.gauge("gangsched_leader", "1 on the replica that schedules.", lambda: float(op.leading))
    metrics.gauge("gangsched_nodes", "Nodes in the cache.", lambda: float(len(cache.nodes)))
    metrics.gauge(
        "gangsched_pods",
        "Unfinished pods (and finished group members) in the cache.",
        lambda: float(len(cache.pods)),
    )
    metrics.gauge("gangsched_pod_groups", "PodGroups in the cache.", lambda: float(len(cache.pod_groups)))
    metrics.gauge(
        "gangsched_assumed_pods",
        "Bound by us, not yet seen bound by the watch.",
        lambda: float(cache.assumed_count),
    )


def build_registry(op: Operator, *, metrics_port: int | None = None) -> kopf.OperatorRegistry:
    """A registry with the watch handlers and this operator's startup, probe and cleanup."""
    registry = kopf.OperatorRegistry()
    register_watch_handlers(
        registry, cache=op.cache, scheduler=op.scheduler, live=op.live, faults=op.scheduler.config.faults
    )
    tasks: list[asyncio.Task[None]] = []
    runners: list[web.AppRunner] = []

    @kopf.on.startup(registry=registry)
    async def start(settings: kopf.OperatorSettings, **_: Any) -> None:
        _configure(settings)
        loop = asyncio.get_running_loop()
        tasks.append(loop.create_task(_main(op, tasks), name="gangsched main"))
        if metrics_port:
            _register_gauges(op)
            runners.append(await serve(op.scheduler.metrics, port=metrics_port))

    @kopf.on.cleanup(registry=registry)
    async def stop(**_: Any) -> None:
        # Never raise here: kopf would retry the cleanup in 60 s and the process would hang.
        try:
            await _shutdown(op, tasks, runners)
        except Exception:
            log.exception("error while stopping; exiting anyway")

    @kopf.on.probe(id="scheduler", registry=registry)
    async def probe(**_: Any) -> dict[str, Any]:
        if tasks and tasks[0].done():
            raise kopf.PermanentError("the scheduling loop has stopped")
        scheduler = op.scheduler
        age = scheduler.clock() - scheduler.heartbeat
        return {
            "leading": op.leading,
            "cycles": scheduler.cycles,
            "loop_age_seconds": round(age, 1) if op.leading else None,
            "pods": len(op.cache.pods),
        }

    return registry


def _configure(settings: kopf.OperatorSettings) -> None:
    settings.posting.enabled = False  # no kopf Events about Pods or Nodes
    # No CRD or namespace discovery: every resource is named in full, and the RBAC can
    # then leave out customresourcedefinitions.
    settings.scanning.disabled = True
    settings.watching.field_selectors["", "v1", "pods"] = LIVE_PODS_SELECTOR
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60


async def _main(op: Operator, tasks: list[asyncio.Task[None]]) -> None:
    if op.elector is not None:
        await op.elector.acquire()
        keeper = op.elector.keep(lambda: _fence(op, tasks))
        tasks.append(asyncio.get_running_loop().create_task(keeper, name="gangsched lease"))
    await op.live.prime()
    op.scheduler.wake()
    await op.scheduler.run()


def _fence(op: Operator, tasks: list[asyncio.Task[None]]) -> None:
    """The Lease is lost: no bind may start once another replica can lead. Stop, then exit
    so the Deployment restarts this replica as a standby."""
    tasks[0].cancel()
    tasks.append(asyncio.get_running_loop().create_task(op.scheduler.stop(), name="gangsched fence"))
    os.kill(os.getpid(), signal.SIGTERM)


async def _shutdown(op: Operator, tasks: list[asyncio.Task[None]], runners: list[web.AppRunner]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await op.scheduler.stop()
    for runner in runners:
        await runner.cleanup()
    if op.elector is not None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(op.elector.release(), timeout=5)


def _login(api: client.ApiClient) -> Callable[..., Awaitable[kopf.ConnectionInfo | None]]:
    async def login(**_: Any) -> kopf.ConnectionInfo | None:
        # The same identity as our own client, whether from a kubeconfig or in-cluster.
        configuration = api.configuration
        if configuration.refresh_api_key_hook is not None:  # in-cluster tokens rotate
            configuration.refresh_api_key_hook(configuration)
        token = configuration.api_key.get("BearerToken") or configuration.api_key.get("authorization")
        if token and token.lower().startswith("bearer "):
            token = token[7:]
        return kopf.ConnectionInfo(
            server=configuration.host,
            ca_path=configuration.ssl_ca_cert,
            insecure=not configuration.verify_ssl,
            token=token or None,
            certificate_path=configuration.cert_file,
            private_key_path=configuration.key_file,
            default_namespace=None,
        )

    return login


def run(options: RunOptions) -> None:
    kopf.configure(
        verbose=options.verbose,
        log_format=kopf.LogFormat.JSON if options.log_format == "json" else kopf.LogFormat.FULL,
    )
    logging.getLogger("aiohttp.access").propagate = False
    if not options.verbose:
        # kopf logs every handled watch event at INFO: thousands of lines for nothing.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    op = assemble(options)
    registry = build_registry(op, metrics_port=options.metrics_port)
    kopf.on.login(registry=registry)(_login(op.api))
    liveness = f"http://0.0.0.0:{options.liveness_port}/healthz" if options.liveness_port else None
    try:
        kopf.run(
            registry=registry,
            clusterwide=True,
            standalone=True,
            liveness_endpoint=liveness,
            # kopf would otherwise look its identity up in /etc/passwd (absent for arbitrary uids).
            identity=Identity(op.binder.instance),
        )
    finally:
        op.transport.close()
