"""The `gangsched` command line."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn, TypeVar

import click

from gangsched import __version__
from gangsched.model import DEFAULT_SCHEDULER_NAME, PodGroupApi, QueueingStrategy

_Command = TypeVar("_Command", bound=Callable[..., Any])


def _output_option(help: str = "Output format.") -> Callable[[_Command], _Command]:
    """`-o/--output text|json`, as every command that prints has it."""
    return click.option(
        "-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True, help=help
    )


def _queueing_option() -> Callable[[_Command], _Command]:
    """`--queueing-strategy`, for `run` and `simulate` alike (`engine.cycle`)."""
    return click.option(
        "--queueing-strategy",
        type=click.Choice([s.value for s in QueueingStrategy]),
        default=QueueingStrategy.BEST_EFFORT_FIFO.value,
        show_default=True,
        help="BestEffortFIFO: a group that does not fit lets later groups use the room it cannot "
        "(backfill). StrictFIFO: within a priority level it blocks every group behind it until it "
        "fits (one that can never fit blocks nothing); higher priorities still go first.",
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gangsched")
def main() -> None:
    """gangsched: gang scheduling with topology-aware placement for Kubernetes."""


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@_output_option()
@click.option(
    "--scheduler-name",
    default=DEFAULT_SCHEDULER_NAME,
    show_default=True,
    help="Pods with this spec.schedulerName and no nodeName are placed.",
)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also draw the GPUs per topology domain after the placement into this PNG (needs gangsched[plot]).",
)
@click.option(
    "--levels",
    default=None,
    help="With --plot: topology label keys, outermost first, comma-separated (default: zone, block, rack).",
)
@_queueing_option()
def simulate(
    paths: tuple[Path, ...],
    output: str,
    scheduler_name: str,
    plot: Path | None,
    levels: str | None,
    queueing_strategy: str,
) -> None:
    """Plan offline: where would gangsched put the pending pods in PATHS?

    PATHS are YAML/JSON files or directories holding Nodes, Pods (bound ones are load),
    PodGroups (gangsched's and Kubernetes' scheduling.k8s.io/v1alpha2) and PriorityClasses,
    and the workloads whose pods make automatic gangs (Jobs, JobSets, PyTorchJobs, ...), which
    are formed as gangsched forms them. Exit 0 whenever the input parsed, 2 when it did not.
    """
    from gangsched import simulate as sim

    try:
        inputs = sim.load(list(paths), scheduler_name=scheduler_name)
    except sim.InputError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    if inputs.skipped:
        kinds = ", ".join(f"{kind} ({count})" for kind, count in sorted(inputs.skipped.items()))
        click.echo(f"warning: skipped objects of unsupported kinds: {kinds}", err=True)
    for group in inputs.shadowed:
        click.echo(
            f"warning: PodGroup {group.namespace}/{group.name}: both {PodGroupApi.GANGSCHED.api_version} "
            f"and {group.api.api_version} have it; gangsched schedules its own and not the native one "
            "(whose pods wait alone): rename one of them",
            err=True,
        )
    for group in inputs.pod_groups:
        if group.ignored_priority is not None:
            click.echo(
                f"warning: PodGroup {group.namespace}/{group.name}: spec.priority "
                f"{group.ignored_priority} is ignored (priority comes from priorityClassName or the "
                "pods' PriorityClass)",
                err=True,
            )
    missing = inputs.missing_owners()
    if missing is not None:
        click.echo(f"warning: {missing}", err=True)
    keys = _levels_option(levels)
    result = sim.run(inputs, scheduler_name=scheduler_name, queueing=QueueingStrategy(queueing_strategy))
    if output == "json":
        click.echo(json.dumps(sim.to_json(result, inputs), indent=2))
    else:
        click.echo(sim.to_text(result, inputs))
    if plot is not None:
        _draw(sim.occupancy(inputs, result, levels=keys), plot)


class SectionedCommand(click.Command):
    """A command whose --help lists its options under headings (click has no option groups).

    `sections` is ``((title, (param name, ...)), ...)`` in display order; an option in no
    section is listed last, under "Other options" (only --help, for `run`).
    """

    def __init__(
        self, *args: Any, sections: tuple[tuple[str, tuple[str, ...]], ...] = (), **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.sections = sections

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        records: dict[str, tuple[str, str]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None and param.name is not None:
                records[param.name] = record
        listed: set[str] = set()
        for title, names in self.sections:
            rows = [records[name] for name in names if name in records]
            listed.update(names)
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)
        rest = [record for name, record in records.items() if name not in listed]
        if rest:
            with formatter.section("Other options"):
                formatter.write_dl(rest)


# The Lease's name is its own: not derived from --scheduler-name, so another scheduler name
# needs no RBAC edit (manifests/role-leader-election.yaml grants get/update on this one).
DEFAULT_LEASE_NAME = "gangsched"

RUN_SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "Scheduling",
        (
            "scheduler_name",
            "namespaces",
            "all_namespaces",
            "queueing_strategy",
            "reservation_after",
            "pod_events",
        ),
    ),
    ("Cluster connection", ("kubeconfig",)),
    (
        "Leader election",
        ("leader_elect", "lease_namespace", "lease_name", "lease_duration", "renew_deadline", "retry_period"),
    ),
    (
        "Observability",
        (
            "liveness_port",
            "metrics_port",
            "bind_address",
            "watch_budget",
            "stall_budget",
            "log_format",
            "verbose",
        ),
    ),
    ("Performance", ("concurrency",)),
)


@main.command(cls=SectionedCommand, sections=RUN_SECTIONS)
@click.option(
    "--namespace",
    "-n",
    "namespaces",
    multiple=True,
    help="Schedule only in these namespaces (not sharding: capacity is always counted cluster-wide).",
)
@click.option(
    "--all-namespaces",
    "-A",
    is_flag=True,
    help="Schedule in every namespace (the default when no --namespace is given).",
)
@click.option(
    "--scheduler-name",
    default=DEFAULT_SCHEDULER_NAME,
    show_default=True,
    help="Pods with this spec.schedulerName are ours.",
)
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False),
    default=None,
    help="Default: in-cluster, else ~/.kube/config.",
)
@click.option(
    "--liveness-port", type=int, default=8080, show_default=True, help="GET /healthz here (0: off)."
)
@click.option(
    "--metrics-port", type=int, default=0, show_default=True, help="Serve Prometheus /metrics here (0: off)."
)
@click.option(
    "--bind-address",
    default=None,
    help="Address /healthz and /metrics listen on. Default: all interfaces in a pod, 127.0.0.1 elsewhere.",
)
@click.option(
    "--concurrency", type=click.IntRange(1, 512), default=32, show_default=True, help="Parallel API writes."
)
@click.option(
    "--log-format",
    type=click.Choice(["human", "json"]),
    default="human",
    show_default=True,
    help="Log lines.",
)
@click.option(
    "--pod-events/--no-pod-events",
    default=True,
    show_default=True,
    help="Post a Scheduled Event on every bound pod, as kube-scheduler does.",
)
@click.option("--verbose", "-v", is_flag=True, help="Debug logging.")
@click.option(
    "--leader-elect/--no-leader-elect",
    default=True,
    show_default=True,
    help="Hold a Lease before scheduling, so that of several instances exactly one schedules.",
)
@click.option(
    "--lease-namespace",
    envvar="POD_NAMESPACE",
    default="default",
    show_default=True,
    help="Namespace of the Lease (default: $POD_NAMESPACE when set).",
)
@click.option(
    "--lease-name",
    default=DEFAULT_LEASE_NAME,
    show_default=True,
    help="Name of the Lease: one per gangsched deployment, whatever --scheduler-name says.",
)
@click.option(
    "--lease-duration", type=float, default=8.0, show_default=True, help="Seconds a Lease is valid."
)
@click.option(
    "--renew-deadline", type=float, default=6.0, show_default=True, help="Seconds to renew it before fencing."
)
@click.option("--retry-period", type=float, default=2.0, show_default=True, help="Seconds between renewals.")
@click.option(
    "--reservation-after",
    type=float,
    default=300.0,
    show_default=True,
    help="Seconds a group waits unschedulable before it reserves the domain it is closest to fitting.",
)
@_queueing_option()
@click.option(
    "--watch-budget",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds a watch may be down before /healthz fails.",
)
@click.option(
    "--stall-budget",
    type=click.FloatRange(min=0),
    default=120.0,
    show_default=True,
    help="Seconds a group with pending pods may go undecided (or a cycle run; a gang be bound: "
    "600 s more) before /healthz fails; 0: off. Above 70: a healthy loop decides every waiting "
    "group at least once a minute.",
)
# Fault injection for tests only (hidden): see gangsched.loop.config.Faults.
@click.option(
    "--fault-bind-delay-seconds",
    type=float,
    default=0.0,
    hidden=True,
    envvar="GANGSCHED_FAULT_BIND_DELAY_SECONDS",
)
@click.option(
    "--fault-watch-delay-seconds",
    type=float,
    default=0.0,
    hidden=True,
    envvar="GANGSCHED_FAULT_WATCH_DELAY_SECONDS",
)
def run(**opts: Any) -> None:
    """Run the scheduler: watch PodGroups, Pods and Nodes; place gangs; bind them."""
    from gangsched.runtime import run as run_operator

    run_operator(_run_options(opts))


def _run_options(opts: dict[str, Any]) -> Any:
    from gangsched.leader import LeaseConfig, default_identity
    from gangsched.loop import Faults, SchedulerConfig
    from gangsched.runtime import RunOptions

    if opts["namespaces"] and opts["all_namespaces"]:
        raise click.UsageError("--namespace and --all-namespaces are exclusive")
    in_pod = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    lease = None
    if opts["leader_elect"]:
        try:
            lease = LeaseConfig(
                namespace=opts["lease_namespace"],
                name=opts["lease_name"],
                identity=default_identity(),
                lease_duration=opts["lease_duration"],
                renew_deadline=opts["renew_deadline"],
                retry_period=opts["retry_period"],
            )
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
    else:
        logging.getLogger("gangsched").warning(
            "leader election is off (--no-leader-elect): only one gangsched instance may run "
            "against this cluster, or they will bind the same capacity twice"
        )
    stall_budget = opts["stall_budget"]
    defaults = SchedulerConfig()
    minimum = defaults.resync_seconds + defaults.backoff_max_seconds
    if 0 < stall_budget <= minimum:
        raise click.UsageError(
            f"--stall-budget must be 0 (off) or above {minimum:g}: a healthy loop leaves an "
            f"unschedulable group undecided for up to {minimum:g}s while nothing changes"
        )
    faults = Faults(
        bind_delay_seconds=opts["fault_bind_delay_seconds"],
        watch_delay_seconds=opts["fault_watch_delay_seconds"],
    )
    return RunOptions(
        scheduler=SchedulerConfig(
            scheduler_name=opts["scheduler_name"],
            namespaces=frozenset(opts["namespaces"]) if opts["namespaces"] else None,
            pod_events=opts["pod_events"],
            reservation_after_seconds=opts["reservation_after"],
            queueing=QueueingStrategy(opts["queueing_strategy"]),
            stall_budget_seconds=stall_budget,
            faults=faults,
        ),
        kubeconfig=opts["kubeconfig"],
        liveness_port=opts["liveness_port"] or None,
        metrics_port=opts["metrics_port"] or None,
        bind_address=opts["bind_address"] or ("0.0.0.0" if in_pod else "127.0.0.1"),
        concurrency=opts["concurrency"],
        log_format=opts["log_format"],
        verbose=opts["verbose"],
        lease=lease,
        watch_budget_seconds=opts["watch_budget"],
    )


@main.command()
@_output_option()
def version(output: str) -> None:
    """Print gangsched's version and the Kubernetes API versions it speaks."""
    from gangsched import apis

    if output == "json":
        used = [
            {
                "group": use.group,
                "version": use.group_version.rpartition("/")[2],
                "kind": use.kind,
                "resource": use.resource,
                "verbs": list(use.verbs),
                "when": use.when,
                "usedBy": use.used_by,
            }
            for use in apis.USED_APIS
        ]
        click.echo(
            json.dumps({"version": __version__, "apis": used, "notUsed": list(apis.NOT_USED)}, indent=2)
        )
        return
    click.echo(f"gangsched {__version__}")
    click.echo("Kubernetes APIs:")
    rows = apis.summary()
    width = max(len(label) for label, _, _ in rows)
    for label, verbs, when in rows:
        line = f"  {label:<{width}}  {verbs}"
        click.echo(line if when == "always" else f"{line} ({when})")
    click.echo("Not used:")
    for text in apis.NOT_USED:
        click.echo(f"  {text}")


# --------------------------------------------------------------------------- the live cluster
# `explain` and `top` read the cluster as kubectl does (they are also `kubectl gangsched ...`).


def _cluster_options(command: Any) -> Any:
    command = click.option(
        "--context", default=None, help="The kubeconfig context to use (default: its current context)."
    )(command)
    return click.option(
        "--kubeconfig",
        type=click.Path(dir_okay=False),
        default=None,
        help="Default: $KUBECONFIG, else in-cluster, else ~/.kube/config.",
    )(command)


def _connect(kubeconfig: str | None, context: str | None) -> Any:
    from gangsched.cluster.read import ClusterError, connect

    try:
        return connect(kubeconfig=kubeconfig, context=context)
    except ClusterError as exc:
        _fail(str(exc))


def _fail(message: str) -> NoReturn:
    """A one-line error on stderr, exit 2 (bad input, or no cluster to ask)."""
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


def _levels_option(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    from gangsched.occupancy import parse_levels

    try:
        return parse_levels(text)
    except ValueError as exc:
        _fail(str(exc))


def until_interrupted(work: Callable[[], None], *, status: int) -> None:
    """Run `work` to its end, or end the process at once with `status` on Ctrl-C (SIGINT).

    At once, whatever `work` is doing: a request in flight, a write blocked on a full stdout
    pipe, a CPU the machine hardly gives it. Python's own Ctrl-C is a KeyboardInterrupt raised
    in the main thread between bytecodes; the way out then is the graceful one (cleanups, then
    the interpreter's shutdown, which flushes stdout into a pipe nobody may read, and takes
    seconds of a busy machine's CPU). So `work` runs in a thread that blocks SIGINT, the main
    thread only waits for it, and the main thread's handler removes the kubeconfig's credential
    files and leaves by os._exit. The handler is installed even where SIGINT was ignored (a job
    started in the background by a script), as kubectl's own watches do. Exceptions of `work`
    (SystemExit included) are raised here. Signals are the main thread's only: called from
    another thread, `work` just runs.
    """
    if threading.current_thread() is not threading.main_thread():
        work()
        return
    from gangsched.cluster.read import remove_credential_files

    def stop(signum: int, frame: FrameType | None) -> None:
        remove_credential_files()
        os._exit(status)

    failure: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # handed to the main thread, which raises it
            failure.append(exc)
        finally:
            done.set()

    worker = threading.Thread(target=run, name="gangsched-cli", daemon=True)
    previous = signal.signal(signal.SIGINT, stop)
    try:
        if sys.platform == "win32":  # no signal masks; Python hands Ctrl-C to the main thread
            worker.start()
        else:
            # The worker inherits this mask, so the kernel gives SIGINT to the main thread, the
            # one waiting for it, whose mask is restored once the worker has started.
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                worker.start()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        while not done.wait(1.0):  # not forever: in case another thread took the signal
            pass
    finally:
        signal.signal(signal.SIGINT, previous)
    if failure:
        raise failure[0]


def _draw(occupancy: Any, path: Path) -> None:
    from gangsched.plot import PlotError, plot_occupancy

    try:
        plot_occupancy(occupancy, path)
    except PlotError as exc:
        _fail(str(exc))
    click.echo(f"wrote {path}", err=True)


@main.command()
@click.argument("name", metavar="NAMESPACE/NAME")
@click.option("-n", "--namespace", default=None, help="The PodGroup's namespace, when NAME has none.")
@_output_option()
@click.option(
    "--scheduler-name",
    default=DEFAULT_SCHEDULER_NAME,
    show_default=True,
    help="The scheduler the pods name (spec.schedulerName).",
)
@_cluster_options
def explain(
    name: str,
    namespace: str | None,
    output: str,
    scheduler_name: str,
    kubeconfig: str | None,
    context: str | None,
) -> None:
    """Why does a PodGroup wait, or where did it go?

    Reads the cluster and runs gangsched's engine on it as the scheduler would: the nodes per
    reason, the domains closest to holding the gang and what limits them, and the smallest
    change that would make it fit now (fewer pods, Preferred instead of Required, a
    toleration, preempting lower-priority gangs, waiting for terminating pods). NAME is a
    PodGroup of gangsched's API or Kubernetes' own (scheduling.k8s.io/v1alpha2); when both
    have one of that name, gangsched's (the one it schedules) is explained. The PodGroup of a
    workload's automatic gang names its owner (Job/train); NAME may also be that PodGroup's
    name before it exists (job-train), or a pod: a pod held while its gang forms says why
    (WaitingForGang), a member of a PodGroup is explained through it.

    Exit 0 when every pod of the group (or the pod) is bound, 1 when it waits, 2 on bad input
    (a malformed name, no such PodGroup or pod, no cluster to ask).
    """
    from gangsched import explain as why
    from gangsched.cluster.read import ClusterError

    try:
        ns, pod_group = why.parse_name(name, namespace)
    except why.BadInputError as exc:
        _fail(str(exc))
    cluster = _connect(kubeconfig, context)
    try:
        with cluster:
            report = why.explain(cluster, ns, pod_group, scheduler_name=scheduler_name)
    except (why.BadInputError, ClusterError) as exc:
        _fail(str(exc))
    if output == "json":
        click.echo(json.dumps(why.to_json(report), indent=2))
    else:
        click.echo(why.to_text(report))
    sys.exit(report.exit_code)


@main.command()
@click.option(
    "--levels",
    default=None,
    help="Topology label keys, outermost first, comma-separated (default: those of "
    "topology.kubernetes.io/zone, example.com/block, example.com/rack the nodes carry).",
)
@click.option(
    "--resource",
    default=None,
    help="Count this resource instead of GPUs (every resource named like a GPU, e.g. nvidia.com/gpu).",
)
@_output_option("Output format (with --watch: one JSON document per line).")
@click.option("--watch", "-w", is_flag=True, help="Refresh until Ctrl-C (which stops it at once, exit 0).")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=2.0,
    show_default=True,
    help="Seconds between refreshes with --watch.",
)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also draw it into this PNG (rewritten on every refresh; needs gangsched[plot]).",
)
@click.option(
    "--scheduler-name",
    default=DEFAULT_SCHEDULER_NAME,
    show_default=True,
    help="Pods of this scheduler not yet bound are listed as waiting.",
)
@_cluster_options
def top(
    levels: str | None,
    resource: str | None,
    output: str,
    watch: bool,
    interval: float,
    plot: Path | None,
    scheduler_name: str,
    kubeconfig: str | None,
    context: str | None,
) -> None:
    """GPUs used and free per topology domain (zone, block, rack), and which gangs hold them.

    Gangs with pods not yet bound are listed below, with the reason their PodGroup gives.
    PodGroups of both APIs count; Kubernetes' own (scheduling.k8s.io/v1alpha2) are marked
    "(native)", and the automatic gang of a workload is followed by its owner, "(Job/train)".
    Exit 0 (also when Ctrl-C ends --watch), 2 when the cluster cannot be read, 130 when Ctrl-C
    interrupts a single look.
    """
    import time

    from gangsched import occupancy
    from gangsched.cluster.read import ClusterError, cluster_kinds, discover_kinds, read_cluster
    from gangsched.explain import held_view

    keys = _levels_option(levels)
    tty = sys.stdout.isatty()

    def look() -> None:
        cluster = _connect(kubeconfig, context)
        with cluster:
            try:
                # Asked once, not on every refresh.
                versions = discover_kinds(cluster, cluster_kinds(dra=False))
            except ClusterError as exc:
                _fail(str(exc))
            served: dict[str, set[str]] = {}  # the owner kinds' discovery, once
            while True:
                try:
                    cache = read_cluster(cluster, dra=False, served=versions)
                    # Pods held while their automatic gang forms, as the operator holds them.
                    view = held_view(cluster, cache, scheduler_name=scheduler_name, served=served)
                except ClusterError as exc:
                    _fail(str(exc))
                held, held_owners = occupancy.held_gangs(view.held, view.gangs, cache.pod_groups)
                pods = cache.pods_for_engine()
                waiting = occupancy.pending_gangs(
                    pods,
                    scheduler_name=scheduler_name,
                    resource=resource,
                    statuses={key: cache.last_status(key) for key in cache.pod_groups},
                    apis={key: group.api for key, group in cache.pod_groups.items()},
                    held=held,
                )
                occ = occupancy.build(
                    list(cache.nodes.values()),
                    pods,
                    levels=keys,
                    resource=resource,
                    waiting=waiting,
                    owners={**occupancy.automatic_owners(cache.pod_groups.values()), **held_owners},
                )
                if output == "json":
                    click.echo(json.dumps(occupancy.to_json(occ), indent=None if watch else 2))
                else:
                    if watch and tty:
                        click.clear()
                    click.echo(occupancy.to_text(occ))
                    if watch:
                        click.echo(f"\n(every {interval:g}s, Ctrl-C to stop)" if tty else "")
                if plot is not None:
                    _draw(occ, plot)
                if not watch:
                    return
                time.sleep(interval)

    # Ctrl-C is how a watch ends; a single look it interrupts did not finish (130, as shells say).
    until_interrupted(look, status=0 if watch else 130)


def plugin_main() -> None:
    """`kubectl-gangsched`: the same commands as a kubectl plugin (`kubectl gangsched top`)."""
    main(prog_name="kubectl gangsched")


if __name__ == "__main__":  # pragma: no cover
    main()
