"""The `gangsched` command line."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

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
    result = sim.run(inputs, scheduler_name=scheduler_name)
    if output == "json":
        click.echo(json.dumps(sim.to_json(result), indent=2))
    else:
        click.echo(sim.to_text(result))


@main.command()
@click.option("--namespace", "-n", "namespaces", multiple=True, help="Schedule only in these namespaces.")
@click.option(
    "--all-namespaces",
    "-A",
    is_flag=True,
    help="Schedule in every namespace (the default when no --namespace is given).",
)
@click.option("--scheduler-name", default=DEFAULT_SCHEDULER_NAME, show_default=True)
@click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False),
    default=None,
    help="Default: in-cluster, else ~/.kube/config.",
)
@click.option("--liveness-port", type=int, default=8080, show_default=True, help="0 disables the endpoint.")
@click.option(
    "--metrics-port", type=int, default=0, show_default=True, help="Serve Prometheus /metrics here (0: off)."
)
@click.option(
    "--concurrency", type=click.IntRange(1, 512), default=32, show_default=True, help="Parallel API writes."
)
@click.option("--log-format", type=click.Choice(["human", "json"]), default="human", show_default=True)
@click.option(
    "--pod-events/--no-pod-events",
    default=True,
    show_default=True,
    help="Post a Scheduled Event on every bound pod, as kube-scheduler does (half of all writes).",
)
@click.option("--verbose", "-v", is_flag=True)
@click.option(
    "--leader-elect/--no-leader-elect",
    default=None,
    help="Hold a Lease before scheduling, so that of several replicas exactly one schedules. "
    "Default: on inside a pod, off elsewhere.",
)
@click.option(
    "--lease-namespace",
    envvar="POD_NAMESPACE",
    default="gangsched-system",
    show_default=True,
    help="Namespace of the Lease (default: $POD_NAMESPACE).",
)
@click.option("--lease-name", default=None, help="Lease name. Default: the scheduler name.")
@click.option("--lease-duration", type=float, default=8.0, show_default=True)
@click.option("--renew-deadline", type=float, default=6.0, show_default=True)
@click.option("--retry-period", type=float, default=2.0, show_default=True)
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
def run(
    namespaces: tuple[str, ...],
    all_namespaces: bool,
    scheduler_name: str,
    kubeconfig: str | None,
    liveness_port: int,
    metrics_port: int,
    concurrency: int,
    log_format: str,
    pod_events: bool,
    verbose: bool,
    leader_elect: bool | None,
    lease_namespace: str,
    lease_name: str | None,
    lease_duration: float,
    renew_deadline: float,
    retry_period: float,
    fault_bind_delay_seconds: float,
    fault_watch_delay_seconds: float,
) -> None:
    """Run the scheduler: watch PodGroups, Pods and Nodes; place gangs; bind them."""
    from gangsched.leader import LeaseConfig, default_identity
    from gangsched.loop import Faults, SchedulerConfig
    from gangsched.runtime import RunOptions
    from gangsched.runtime import run as run_operator

    if namespaces and all_namespaces:
        raise click.UsageError("--namespace and --all-namespaces are exclusive")
    lease = None
    if leader_elect is None:
        leader_elect = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    if leader_elect:
        try:
            lease = LeaseConfig(
                namespace=lease_namespace,
                name=lease_name or scheduler_name,
                identity=default_identity(),
                lease_duration=lease_duration,
                renew_deadline=renew_deadline,
                retry_period=retry_period,
            )
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
    options = RunOptions(
        scheduler=SchedulerConfig(
            scheduler_name=scheduler_name,
            namespaces=frozenset(namespaces) if namespaces else None,
            pod_events=pod_events,
            faults=Faults(
                bind_delay_seconds=fault_bind_delay_seconds, watch_delay_seconds=fault_watch_delay_seconds
            ),
        ),
        kubeconfig=kubeconfig,
        liveness_port=liveness_port or None,
        metrics_port=metrics_port or None,
        concurrency=concurrency,
        log_format=log_format,
        verbose=verbose,
        lease=lease,
    )
    run_operator(options)


if __name__ == "__main__":  # pragma: no cover
    main()
