"""The `gangsched` command line."""

from __future__ import annotations

import json
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


if __name__ == "__main__":  # pragma: no cover
    main()
