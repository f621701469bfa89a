"""Assemble and run the operator: API clients, cache, watches, binder, loop, kopf; startup to shutdown.

Watches run cluster-wide whatever `--namespace` says: capacity accounting needs every bound
pod on every node. The namespace option limits which PodGroups and pods are scheduled.

Every kind of the table (`cluster.kinds.TABLE`) is watched through an informer
(`cluster.informer`: list+watch that removes what a re-list no longer shows, and lists again
after any outage) into `handlers.Intake`: the core kinds always, the others (PodGroups of both
APIs, the DRA kinds, workload owners) where discovery finds them served, at startup and every
`DISCOVERY_SECONDS` after for those not served yet (a CRD installed later is watched within
seconds; one no longer served stops being watched). kopf hosts the process: its startup and
cleanup handlers are registered here, and it watches nothing (docs/architecture.md says why).
`/healthz` is ours (`_serve_health`): 200 with what the replica does, or 503 with why it
cannot do its job, as JSON, asked afresh each time (kopf's probe endpoint cached answers for
10 s and turned a failing probe into a 500 and a traceback in the log).

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
import gc
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import kopf
from aiohttp import web
from kubernetes import client

from gangsched import __version__
from gangsched.binder import Binder
from gangsched.cluster import ClusterCache, LiveReader
from gangsched.cluster.discovery import discover
from gangsched.cluster.informer import Informer, NotServedError, Resource, WatchHealth
from gangsched.cluster.kinds import KINDS as KINDS_BY_NAME
from gangsched.cluster.kinds import NATIVE_POD_GROUP, POD_GROUP, TABLE, WATCHED_WITH
from gangsched.cluster.store import Kind, Role
from gangsched.handlers import Intake
from gangsched.leader import LeaderElector, LeaseConfig, default_identity
from gangsched.loop import Scheduler, SchedulerConfig
from gangsched.metrics import Metrics, serve
from gangsched.session import ApiSession, bearer_token, load_configuration
from gangsched.transport import Transport

log = logging.getLogger(__name__)

# Kinds not served (a CRD not installed yet) are looked for again this often: one discovery
# GET per group/version not served yet.
DISCOVERY_SECONDS = 5.0


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


@dataclass(slots=True)
class Operator:
    """The parts of one running operator."""

    options: RunOptions
    configuration: client.Configuration
    # Which replica wrote what, in the apiserver's audit log.
    user_agent: str
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
    # The informer of each kind watched (kind name -> informer): those served.
    watching: dict[str, Informer] = field(default_factory=dict)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    synced: asyncio.Event | None = None

    @property
    def leading(self) -> bool:
        return self.elector is None or self.elector.leading


def assemble(options: RunOptions) -> Operator:
    configuration = load_configuration(kubeconfig=options.kubeconfig)
    identity = options.lease.identity if options.lease else default_identity()
    # Which replica wrote what, in the apiserver's audit log.
    user_agent = f"gangsched/{__version__} ({identity})"
    elector = (
        LeaderElector(configuration=configuration, user_agent=user_agent, config=options.lease)
        if options.lease
        else None
    )
    transport = Transport(
        configuration=configuration,
        user_agent=user_agent,
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
    if elector is not None:
        stats = elector.renewals
        elector.on_renewal_lag = metrics.lease_renewal_lag(lambda: stats.lag_max).observe
    scheduler = Scheduler(cache=cache, binder=binder, live=live, config=options.scheduler, metrics=metrics)
    intake = Intake(cache=cache, scheduler=scheduler, live=live, faults=options.scheduler.faults)
    # A PodGroup deleted, or another object under its name now: the loop starts afresh.
    cache.on_group_replaced = scheduler.forget_group
    live.on_settled = scheduler.wake
    return Operator(
        options,
        configuration,
        user_agent,
        transport,
        cache,
        live,
        binder,
        scheduler,
        intake,
        WatchHealth(),
        elector,
    )


def _start_watches(op: Operator) -> None:
    """One informer per kind served (`_discover` found them), all into `Intake`."""
    op.session = ApiSession(op.configuration, user_agent=op.user_agent)
    # No garbage collection while the first LISTs fill the cache (`_synced` turns it back on):
    # every object they make lives on, and the collector's passes over a growing heap were a
    # third of the time to take in 100,000 pods.
    gc.disable()
    for kind in TABLE:
        version = op.cache.served.get(kind.name)
        if version is not None and kind.watched:
            _watch(op, kind, version)
    loop = asyncio.get_running_loop()
    op.tasks.append(loop.create_task(_synced(op, list(op.watching.values())), name="first lists"))
    op.tasks.append(loop.create_task(_discover_later(op), name="discovery"))


def _watch(op: Operator, kind: Kind[Any], version: str) -> None:
    """Watch `kind` at `version` from now on: decisions that read it wait for its first LIST."""
    assert op.session is not None
    op.cache.serve(kind.name, version)
    op.cache.expect(kind.name)
    resource = Resource(kind.name, kind.path(version), kind.query)
    informer = Informer(
        session=op.session, resource=resource, sink=op.intake.sink(kind.name), health=op.health
    )
    op.watching[kind.name] = informer
    op.tasks.append(
        asyncio.get_running_loop().create_task(_inform(op, kind, informer), name=f"informer {kind.name}")
    )


async def _inform(op: Operator, kind: Kind[Any], informer: Informer) -> None:
    """Run one informer; a kind the API no longer serves (its CRD deleted) stops being
    watched, what was held of it goes, and discovery looks for it again."""
    try:
        await informer.run()
    except NotServedError as exc:
        log.warning("%s is not served any more (%s): no longer watched", kind.name, exc)
        if op.watching.get(kind.name) is informer:
            del op.watching[kind.name]
        op.health.forget(kind.name)
        op.cache.unwatched(kind.name)
        op.scheduler.wake()


async def _discover(op: Operator, *, startup: bool = False) -> None:
    """Find the kinds of the table the API serves and is not watched yet (a kind watched only
    with another, the LeaderWorkerSet's StatefulSets, follows it). At startup they are only
    recorded (`_start_watches` starts them all at once); later each is watched at once."""
    wanted = [k for k in TABLE if k.watched and k.name not in op.watching and k.name not in WATCHED_WITH]
    found = await discover(op.transport.get, wanted)
    if found.unreachable is not None:
        log.warning("could not reach the API for discovery (%s); asking again", found.unreachable)
    for group_version, error in found.failed.items():
        log.log(
            logging.WARNING if startup else logging.DEBUG,
            "could not tell what %s serves: %s; asking again",
            group_version,
            error,
        )
    for kind in wanted:
        version = found.served.get(kind.name)
        if version is None:
            continue
        followers = [KINDS_BY_NAME[name] for name, leader in WATCHED_WITH.items() if leader is kind]
        if startup:
            op.cache.serve(kind.name, version)
            for follower in followers:
                op.cache.serve(follower.name, follower.versions[0])
            continue
        log.info("%s (%s) is served now: watching it", kind.name, kind.api_version(version))
        _watch(op, kind, version)
        for follower in followers:
            if follower.name not in op.watching:
                _watch(op, follower, follower.versions[0])
    if startup:
        _say_what_is_served(op)


def _say_what_is_served(op: Operator) -> None:
    """One line per optional part, at startup: what works, and what does not and why."""
    served = op.cache.served
    if POD_GROUP.name not in served:
        log.warning(
            "%s PodGroups are not served: install gangsched's CRD (kubectl apply -f crds/). Until then "
            "pods without a PodGroup are scheduled one by one and automatic gangs wait for it",
            POD_GROUP.api_version(),
        )
    if NATIVE_POD_GROUP.name in served:
        log.info(
            "%s podgroups are served: native PodGroups are scheduled too",
            NATIVE_POD_GROUP.api_version(served[NATIVE_POD_GROUP.name]),
        )
    else:
        log.info(
            "%s podgroups are not served: native PodGroups are not scheduled (gangsched's %s PodGroups are)",
            NATIVE_POD_GROUP.api_version(),
            POD_GROUP.api_version(),
        )
    if not op.cache.devices.enabled:
        log.info("resource.k8s.io is not served: DRA (ResourceClaims) is off")
    owners = [k for k in TABLE if k.role is Role.OWNERS and k.name in served and k.name not in WATCHED_WITH]
    log.info(
        "automatic gangs from: %s",
        ", ".join(f"{k.api_kind} ({k.api_version(served[k.name])})" for k in owners)
        or "no owner kind served",
    )


async def _discover_later(op: Operator) -> None:
    """Watch a kind once it is served (its CRD installed after gangsched started)."""
    while True:
        await asyncio.sleep(DISCOVERY_SECONDS)
        if all(k.name in op.watching for k in TABLE if k.watched):
            continue
        try:
            await _discover(op)
        except Exception as exc:
            log.debug("discovery failed: %s", exc)


async def _synced(op: Operator, informers: list[Informer]) -> None:
    """Set `op.synced` once every watch started at startup has listed; then freeze what the
    LISTs made and turn the garbage collector back on (also if the LISTs take longer than
    `_GC_OFF_SECONDS`)."""
    assert op.synced is not None
    started = time.monotonic()
    try:
        while not all(op.health.snapshot().get(i.resource.kind, {"lists": 1})["lists"] for i in informers):
            if not gc.isenabled() and time.monotonic() - started > _GC_OFF_SECONDS:
                gc.enable()
            await asyncio.sleep(0.05)
    finally:
        # The cache's objects outlive every cycle: frozen, no collection walks them again
        # (a full pass over 100,000 pods was 0.3 s, taken again and again while binding).
        gc.freeze()
        gc.enable()
    op.synced.set()


# The garbage collector stays off at most this long while the first LISTs come in.
_GC_OFF_SECONDS = 60.0


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
    """A registry with this operator's startup, probe and cleanup (no watch handlers)."""
    registry = kopf.OperatorRegistry()
    runners: list[web.AppRunner] = []

    @kopf.on.startup(registry=registry)
    async def start(settings: kopf.OperatorSettings, **_: Any) -> None:
        _configure(settings)
        op.synced = asyncio.Event()
        if op.options.liveness_port:
            runners.append(
                await _serve_health(op, host=op.options.bind_address, port=op.options.liveness_port)
            )
        await _discover(op, startup=True)
        _start_watches(op)
        op.tasks.insert(0, asyncio.get_running_loop().create_task(_main(op), name="gangsched main"))
        if op.options.metrics_port:
            _register_gauges(op)
            runners.append(
                await serve(
                    op.scheduler.metrics,
                    port=op.options.metrics_port,
                    host=op.options.bind_address,
                    debug=lambda: _debug(op),
                )
            )

    @kopf.on.cleanup(registry=registry)
    async def stop(**_: Any) -> None:
        # Never raise here: kopf would retry the cleanup in 60 s and the process would hang.
        try:
            await _shutdown(op, runners)
        except Exception:
            log.exception("error while stopping; exiting anyway")

    return registry


async def _serve_health(op: Operator, *, host: str, port: int) -> web.AppRunner:
    """GET /healthz: 200 and what the replica does, or 503 and why it cannot do its job
    (`_problems`), both JSON; a failure is said once in the log where it starts."""
    said: list[str] = []

    async def healthz(_: web.Request) -> web.Response:
        problems = _problems(op)
        if problems:
            if problems != said:
                log.error("/healthz fails: %s", "; ".join(problems))
                said[:] = problems
            return web.json_response({"healthy": False, "problems": problems}, status=503)
        said.clear()
        scheduler = op.scheduler
        age = scheduler.clock() - scheduler.heartbeat
        status = {
            "leading": op.leading,
            "cycles": scheduler.cycles,
            "loop_age_seconds": round(age, 1) if op.leading else None,
            "pods": len(op.cache.pods),
            "watches": op.health.snapshot(),
            "served": dict(op.cache.served),
        }
        return web.json_response({"healthy": True, "scheduler": status})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


def _debug(op: Operator) -> dict[str, Any]:
    """GET /debug/cache: the cache, the watches and (leader election on) the Lease keeper."""
    found: dict[str, Any] = {"cache": op.cache.summary(), "watches": op.health.snapshot()}
    if op.elector is not None:
        found["lease"] = op.elector.debug()
    return found


def _problems(op: Operator) -> list[str]:
    """Why this replica cannot do its job (and should be restarted), if it cannot."""
    problems = []
    if op.tasks and op.tasks[0].done():
        problems.append("the scheduling loop has stopped")
    stalled = op.scheduler.liveness.stalled()  # None on a standby: its loop does not run
    if stalled is not None:
        problems.append(f"the scheduling loop is stalled: {stalled}")
    problems += op.health.problems(op.options.watch_budget_seconds)
    return problems


def _configure(settings: kopf.OperatorSettings) -> None:
    settings.posting.enabled = False  # no kopf Events about our objects
    # No CRD or namespace discovery: kopf watches nothing, and the RBAC can then leave out
    # customresourcedefinitions.
    settings.scanning.disabled = True


async def _main(op: Operator) -> None:
    if op.elector is not None:
        # The elector renews on a thread of its own from the moment it leads (leader.py): this
        # loop may be busy for seconds. The task only stands for the keeper: cancelling it (a
        # shutdown) stops the renewals, and a loss calls _fence here, thread-safely.
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
    await op.live.close()
    for runner in runners:
        await runner.cleanup()
    if op.session is not None:
        await op.session.close()
    await op.transport.close()
    if op.elector is not None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(op.elector.release(), timeout=5)
        await op.elector.close()


def _login(configuration: client.Configuration) -> Callable[..., Awaitable[kopf.ConnectionInfo | None]]:
    async def login(**_: Any) -> kopf.ConnectionInfo | None:
        # The same identity as our own client, whether from a kubeconfig or in-cluster.
        return kopf.ConnectionInfo(
            server=configuration.host,
            ca_path=configuration.ssl_ca_cert,
            insecure=not configuration.verify_ssl,
            token=bearer_token(configuration),
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
    kopf.on.login(registry=registry)(_login(op.configuration))
    _set_kopf_identity(op.binder.instance)
    kopf.run(
        registry=registry,
        clusterwide=True,
        standalone=True,
    )


def _set_kopf_identity(identity: str) -> None:
    """kopf looks its identity up in /etc/passwd (absent for arbitrary uids) unless $POD_ID
    names it, its documented way; `kopf.run(identity=...)` takes a type kopf does not export."""
    os.environ["POD_ID"] = identity
