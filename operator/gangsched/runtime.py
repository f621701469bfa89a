"""Assemble and run the operator: API clients, cache, watches, binder, loop, kopf; startup to shutdown.

Watches run cluster-wide whatever `--namespace` says: capacity accounting needs every bound
pod on every node. The namespace option limits which PodGroups and pods are scheduled.

Which kind is watched how: Pods, Nodes and PriorityClasses through informers
(`cluster.informer`: list+watch that removes what a re-list no longer shows), PodGroups
through a kopf `on.event` handler plus a reconciling LIST (kopf's re-list never reports what
vanished). Kubernetes' own scheduling.k8s.io/v1alpha2 PodGroups, where the API serves them
(checked once at startup, like DRA), through an informer into the same `Intake`. kopf's
startup, probe and cleanup handlers are registered here.

Lifecycle: at startup the watches begin (a standby keeps its cache warm but never decides or
writes); the main task waits for the Lease when leader election is on, then for every watch
to have listed once, then runs the loop. Losing the Lease fences the loop and exits, so the
Deployment restarts the replica as a standby. The liveness endpoint fails while the loop has
stopped or stalled (placeable work left undecided past `--stall-budget`), or a watch has been
down longer than its budget, so Kubernetes restarts a replica that cannot recover.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import kopf
from aiohttp import web
from kopf._core.engines.peering import Identity  # kopf exports no public name for it
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from gangsched import __version__
from gangsched.binder import Binder
from gangsched.cluster import ClusterCache, LiveReader
from gangsched.cluster.cache import pod_group_resource
from gangsched.cluster.devices import DEVICE_CLASSES, RESOURCE_CLAIMS, RESOURCE_SLICES
from gangsched.cluster.informer import Informer, Reconciler, Resource, WatchHealth
from gangsched.handlers import Intake, KindSink, register_kopf_handlers
from gangsched.leader import LeaderElector, LeaseConfig, default_identity
from gangsched.loop import Scheduler, SchedulerConfig
from gangsched.metrics import Metrics, serve
from gangsched.model import GROUP, LIVE_PODS_SELECTOR, PLURAL, VERSION, PodGroupApi
from gangsched.session import ApiSession
from gangsched.transport import Transport

log = logging.getLogger(__name__)

# kopf gives up a request after its retry budget; a watcher that gives up is gone for good.
# This keeps its watches retrying through a long apiserver outage (about 8 hours).
_KOPF_ERROR_BACKOFFS = (1, 1, 2, 3, 5, 8, 13, 21, *([30] * 1000))


@dataclass(slots=True)
class RunOptions:
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    kubeconfig: str | None = None
    liveness_port: int | None = 8080
    metrics_port: int | None = None
    # Where /healthz and /metrics listen.
    bind_address: str = "0.0.0.0"
    concurrency: int = 32
    log_format: str = "human"
    verbose: bool = False
    lease: LeaseConfig | None = None
    # A watch down longer than this makes the liveness probe fail.
    watch_budget_seconds: float = 60.0
    # PodGroups (kopf-watched) are re-listed this often to drop what kopf never reports gone.
    reconcile_seconds: float = 10.0


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

    options: RunOptions
    api: client.ApiClient
    transport: Transport
    cache: ClusterCache
    live: LiveReader
    binder: Binder
    scheduler: Scheduler
    intake: Intake
    health: WatchHealth
    elector: LeaderElector | None
    # Created on kopf's event loop at startup.
    session: ApiSession | None = None
    reconciler: Reconciler | None = None
    informers: list[Informer] = field(default_factory=list)
    # When kopf's PodGroup watcher was last seen alive, or our loop synced (monotonic):
    # kopf starts its watchers only after every startup handler, so right after the sync
    # there may be none yet.
    kopf_watch_seen: float | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    synced: asyncio.Event | None = None

    @property
    def leading(self) -> bool:
        return self.elector is None or self.elector.leading


def assemble(options: RunOptions) -> Operator:
    api = api_client(kubeconfig=options.kubeconfig, pool=options.concurrency + 4)
    identity = options.lease.identity if options.lease else default_identity()
    # Which replica wrote what, in the apiserver's audit log.
    api.user_agent = f"gangsched/{__version__} ({identity})"
    elector = LeaderElector(api=api, config=options.lease) if options.lease else None
    transport = Transport(
        configuration=api.configuration,
        user_agent=api.user_agent,
        concurrency=options.concurrency,
        fence=elector.write_allowed if elector is not None else None,
        write_timeout=elector.write_timeout if elector is not None else 30.0,
    )
    cache = ClusterCache()
    live = LiveReader(cache=cache, transport=transport, scheduler_name=options.scheduler.scheduler_name)
    binder = Binder(
        transport=transport,
        bind_delay_seconds=options.scheduler.faults.bind_delay_seconds,
        instance=identity,
    )
    metrics = Metrics()
    cache.on_confirmed = metrics.cache_lag.observe
    scheduler = Scheduler(cache=cache, binder=binder, live=live, config=options.scheduler, metrics=metrics)
    intake = Intake(cache=cache, scheduler=scheduler, live=live, faults=options.scheduler.faults)
    return Operator(options, api, transport, cache, live, binder, scheduler, intake, WatchHealth(), elector)


def _start_watches(op: Operator) -> None:
    """Informers for Pods, Nodes and PriorityClasses; the reconciler for kopf's PodGroups."""
    session = op.session = ApiSession(op.api.configuration, user_agent=op.api.user_agent)
    intake = op.intake
    kinds = [
        (
            Resource("pods", "/api/v1/pods", {"fieldSelector": LIVE_PODS_SELECTOR}),
            intake.pod,
            intake.pods_listed,
        ),
        (Resource("nodes", "/api/v1/nodes"), intake.node, intake.nodes_listed),
        (
            Resource("priorityclasses", "/apis/scheduling.k8s.io/v1/priorityclasses"),
            intake.priority_class,
            intake.priority_classes_listed,
        ),
        (
            Resource("poddisruptionbudgets", "/apis/policy/v1/poddisruptionbudgets"),
            intake.budget,
            intake.budgets_listed,
        ),
    ]
    op.informers = [
        Informer(session=session, resource=r, sink=KindSink(on_event, on_list), health=op.health)
        for r, on_event, on_list in kinds
    ]
    if op.cache.devices.enabled:
        op.informers += [
            Informer(
                session=session,
                resource=Resource(kind, f"/apis/resource.k8s.io/v1/{kind}"),
                sink=intake.dra_sink(kind),
                health=op.health,
            )
            for kind in (DEVICE_CLASSES, RESOURCE_SLICES, RESOURCE_CLAIMS)
        ]
    if op.cache.native_pod_groups:
        native = PodGroupApi.NATIVE
        op.informers.append(
            Informer(
                session=session,
                resource=Resource(pod_group_resource(native), f"/apis/{native.api_version}/{PLURAL}"),
                sink=intake.native_pod_group_sink(),
                health=op.health,
            )
        )
    pod_groups = Resource(PLURAL, f"/apis/{GROUP}/{VERSION}/{PLURAL}")
    op.reconciler = Reconciler(
        session=session,
        resources=[(pod_groups, KindSink(intake.pod_group, intake.pod_groups_listed))],
        period=op.options.reconcile_seconds,
    )
    # Another watch back after an outage: kopf's PodGroup watch lost events too.
    op.health.on_recovered.append(op.reconciler.request)
    loop = asyncio.get_running_loop()
    for informer in op.informers:
        op.tasks.append(loop.create_task(informer.run(), name=f"informer {informer.resource.kind}"))
    op.tasks.append(loop.create_task(_sync_then_reconcile(op), name="reconciler"))


async def _discover_dra(op: Operator) -> None:
    """Watch the DRA kinds only where the API serves resource.k8s.io/v1 (DRA is GA since
    1.34; a cluster without it must not keep a watch failing, which would fail /healthz)."""
    try:
        await op.transport.call("GET", "/apis/resource.k8s.io/v1")
    except ApiException as exc:
        if exc.status == 404:
            log.info("resource.k8s.io/v1 is not served: DRA (ResourceClaims) is off")
            return
        log.warning("could not tell whether resource.k8s.io/v1 is served (%s); watching it", exc.status)
    except Exception as exc:
        log.warning("could not tell whether resource.k8s.io/v1 is served (%s); watching it", exc)
    op.cache.devices.enabled = True


async def _discover_native_pod_groups(op: Operator) -> None:
    """Schedule Kubernetes' own PodGroups only where the API serves scheduling.k8s.io/v1alpha2
    podgroups (alpha in 1.36: --runtime-config and the GenericWorkload gate); elsewhere one
    line says so and gangsched's PodGroup works as everywhere."""
    native = PodGroupApi.NATIVE
    try:
        found = await op.transport.call("GET", f"/apis/{native.api_version}")
    except ApiException as exc:
        if exc.status == 404:
            log.info(
                "%s is not served: native PodGroups are not scheduled (gangsched's %s PodGroups are)",
                native.api_version,
                PodGroupApi.GANGSCHED.api_version,
            )
            return
        log.warning("could not tell whether %s is served (%s); watching it", native.api_version, exc.status)
        op.cache.native_pod_groups = True
        return
    except Exception as exc:
        log.warning("could not tell whether %s is served (%s); watching it", native.api_version, exc)
        op.cache.native_pod_groups = True
        return
    resources = {str(r.get("name")) for r in (found or {}).get("resources") or [] if isinstance(r, dict)}
    if PLURAL not in resources:
        log.info(
            "%s is served without podgroups: native PodGroups are not scheduled (gangsched's %s "
            "PodGroups are)",
            native.api_version,
            PodGroupApi.GANGSCHED.api_version,
        )
        return
    op.cache.native_pod_groups = True
    log.info("%s podgroups are served: native PodGroups are scheduled too", native.api_version)


async def _sync_then_reconcile(op: Operator) -> None:
    """Set `op.synced` once every watch has listed, then reconcile kopf's kinds forever."""
    assert op.reconciler is not None
    assert op.synced is not None
    while not all(op.health.snapshot()[i.resource.kind]["lists"] for i in op.informers):
        await asyncio.sleep(0.05)
    for resource, sink in op.reconciler.resources:
        while not await op.reconciler.once(resource, sink):
            await asyncio.sleep(0.5)
    op.synced.set()
    await op.reconciler.run()


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
        "gangsched_reservations",
        "Anti-starvation reservations held (at most one per priority level).",
        lambda: float(len(op.scheduler.reservations)),
    )
    metrics.gauge(
        "gangsched_assumed_pods",
        "Bound by us, not yet seen bound by the watch.",
        lambda: float(cache.assumed_count),
    )


def build_registry(op: Operator) -> kopf.OperatorRegistry:
    """A registry with the PodGroup handler and this operator's startup, probe and cleanup."""
    registry = kopf.OperatorRegistry()
    runners: list[web.AppRunner] = []

    def relisted() -> None:
        if op.synced is not None and op.synced.is_set() and op.reconciler is not None:
            op.reconciler.request()

    register_kopf_handlers(registry, intake=op.intake, relisted=relisted)

    @kopf.on.startup(registry=registry)
    async def start(settings: kopf.OperatorSettings, **_: Any) -> None:
        _configure(settings)
        op.synced = asyncio.Event()
        await _discover_dra(op)
        await _discover_native_pod_groups(op)
        _start_watches(op)
        op.tasks.insert(0, asyncio.get_running_loop().create_task(_main(op), name="gangsched main"))
        if op.options.metrics_port:
            _register_gauges(op)
            runners.append(
                await serve(
                    op.scheduler.metrics,
                    port=op.options.metrics_port,
                    host=op.options.bind_address,
                    debug=lambda: {"cache": op.cache.summary(), "watches": op.health.snapshot()},
                )
            )

    @kopf.on.cleanup(registry=registry)
    async def stop(**_: Any) -> None:
        # Never raise here: kopf would retry the cleanup in 60 s and the process would hang.
        try:
            await _shutdown(op, runners)
        except Exception:
            log.exception("error while stopping; exiting anyway")

    @kopf.on.probe(id="scheduler", registry=registry)
    async def probe(**_: Any) -> dict[str, Any]:
        problems = _problems(op)
        if problems:
            raise kopf.PermanentError("; ".join(problems))
        scheduler = op.scheduler
        age = scheduler.clock() - scheduler.heartbeat
        return {
            "leading": op.leading,
            "cycles": scheduler.cycles,
            "loop_age_seconds": round(age, 1) if op.leading else None,
            "pods": len(op.cache.pods),
            "watches": op.health.snapshot(),
        }

    return registry


def _problems(op: Operator) -> list[str]:
    """Why this replica cannot do its job (and should be restarted), if it cannot."""
    problems = []
    if op.tasks and op.tasks[0].done():
        problems.append("the scheduling loop has stopped")
    stalled = op.scheduler.liveness.stalled()  # None on a standby: its loop does not run
    if stalled is not None:
        problems.append(f"the scheduling loop is stalled: {stalled}")
    problems += op.health.problems(op.options.watch_budget_seconds)
    if op.synced is not None and op.synced.is_set():
        now = time.monotonic()
        if _kopf_watching(PLURAL) or op.kopf_watch_seen is None:
            op.kopf_watch_seen = now
        elif now - op.kopf_watch_seen > _KOPF_WATCH_GRACE_SECONDS:
            problems.append(f"kopf's {PLURAL} watch has stopped")
    return problems


# How long kopf's PodGroup watcher may be missing (not yet started, or restarting) before the
# replica counts as unhealthy.
_KOPF_WATCH_GRACE_SECONDS = 30.0


def _kopf_watching(plural: str) -> bool:
    """Is kopf's watcher task for `plural` alive? (kopf names them "watcher for <resource>@<ns>".)"""
    prefix = f"watcher for {plural}."
    return any(t.get_name().startswith(prefix) and not t.done() for t in asyncio.all_tasks())


def _configure(settings: kopf.OperatorSettings) -> None:
    settings.posting.enabled = False  # no kopf Events about our objects
    # No CRD or namespace discovery: every resource is named in full, and the RBAC can
    # then leave out customresourcedefinitions.
    settings.scanning.disabled = True
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60
    settings.networking.error_backoffs = _KOPF_ERROR_BACKOFFS


async def _main(op: Operator) -> None:
    if op.elector is not None:
        await op.elector.acquire()
        keeper = op.elector.keep(lambda: _fence(op))
        op.tasks.append(asyncio.get_running_loop().create_task(keeper, name="gangsched lease"))
    assert op.synced is not None
    await op.synced.wait()
    await op.live.prime_finished()
    op.scheduler.wake()
    await op.scheduler.run()


def _fence(op: Operator) -> None:
    """The Lease is lost: no bind may start once another replica can lead. Stop, then exit
    so the Deployment restarts this replica as a standby."""
    op.tasks[0].cancel()
    op.tasks.append(asyncio.get_running_loop().create_task(op.scheduler.stop(), name="gangsched fence"))
    os.kill(os.getpid(), signal.SIGTERM)


async def _shutdown(op: Operator, runners: list[web.AppRunner]) -> None:
    for task in op.tasks:
        task.cancel()
    # The loop's own writes (bindings, Events, statuses) first: once the Lease keeper is gone
    # the fence refuses them anyway, and a backlog of them would only be refused one by one.
    await op.scheduler.stop()
    await asyncio.gather(*op.tasks, return_exceptions=True)
    for runner in runners:
        await runner.cleanup()
    if op.session is not None:
        await op.session.close()
    await op.transport.close()
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
    registry = build_registry(op)
    kopf.on.login(registry=registry)(_login(op.api))
    host = options.bind_address
    liveness = f"http://{host}:{options.liveness_port}/healthz" if options.liveness_port else None
    kopf.run(
        registry=registry,
        clusterwide=True,
        standalone=True,
        liveness_endpoint=liveness,
        # kopf would otherwise look its identity up in /etc/passwd (absent for arbitrary uids).
        identity=Identity(op.binder.instance),
    )
