"""The `gangsched` command line."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

import click

from gangsched import __version__
from gangsched.model import DEFAULT_SCHEDULER_NAME


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gangsched")
def main() -> None:
    """gangsched: gang scheduling with topology-aware placement for Kubernetes."""


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Output format.",
)
@click.option(
    "--scheduler-name",
    default=DEFAULT_SCHEDULER_NAME,
    show_default=True,
    help="Pods with this spec.schedulerName and no nodeName are placed.",
)
def simulate(paths: tuple[Path, ...], output: str, scheduler_name: str) -> None:
    """Plan offline: where would gangsched put the pending pods in PATHS?

    PATHS are YAML/JSON files or directories holding Nodes, Pods (bound ones are load),
    PodGroups and PriorityClasses. Exit 0 whenever the input parsed, 2 when it did not.
    """
    from gangsched import simulate as sim

    try:
        inputs = sim.load(list(paths))
    except sim.InputError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    if inputs.skipped:
        kinds = ", ".join(f"{kind} ({count})" for kind, count in sorted(inputs.skipped.items()))
        click.echo(f"warning: skipped objects of unsupported kinds: {kinds}", err=True)
    for group in inputs.pod_groups:
        if group.ignored_priority is not None:
            click.echo(
                f"warning: PodGroup {group.namespace}/{group.name}: spec.priority "
                f"{group.ignored_priority} is ignored (priority comes from priorityClassName or the "
                "pods' PriorityClass)",
                err=True,
            )
    result = sim.run(inputs, scheduler_name=scheduler_name)
    if output == "json":
        click.echo(json.dumps(sim.to_json(result), indent=2))
    else:
        click.echo(sim.to_text(result))


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
    ("Scheduling", ("scheduler_name", "namespaces", "all_namespaces", "reservation_after", "pod_events")),
    ("Cluster connection", ("kubeconfig",)),
    (
        "Leader election",
        ("leader_elect", "lease_namespace", "lease_name", "lease_duration", "renew_deadline", "retry_period"),
    ),
    (
        "Observability",
        ("liveness_port", "metrics_port", "bind_address", "watch_budget", "log_format", "verbose"),
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
@click.option(
    "--watch-budget",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds a watch may be down before /healthz fails.",
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
@click.option(
    "-o",
    "--output",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Output format.",
)
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


if __name__ == "__main__":  # pragma: no cover
    main()
