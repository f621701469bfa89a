"""`gangsched run --help` in sections, a help line for every option, `gangsched version`, and the
Lease name that needs no RBAC edit for another --scheduler-name (issue 16 item 7)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner

from gangsched import __version__, apis, cli

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = ("Scheduling", "Cluster connection", "Leader election", "Observability", "Performance")


def invoke(*args: str) -> str:
    result = CliRunner().invoke(cli.main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def run_command() -> click.Command:
    return cli.main.commands["run"]


def visible_options(command: click.Command) -> list[click.Option]:
    return [p for p in command.params if isinstance(p, click.Option) and not p.hidden]


def help_sections(text: str) -> dict[str, list[str]]:
    """Section title -> the long option names listed under it."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        heading = re.fullmatch(r"(\S.*):", line)
        if heading:
            current = sections.setdefault(heading.group(1), [])
        elif current is not None and (option := re.match(r"  (-\S.*?)(?:  |$)", line)):
            current += re.findall(r"--[a-z][a-z-]*", option.group(1))  # the option column, not its help
    return sections


def test_run_help_lists_options_in_sections_in_order() -> None:
    text = invoke("run", "--help")
    sections = help_sections(text)
    assert list(sections)[: len(SECTIONS)] == list(SECTIONS)
    assert sections["Scheduling"][0] == "--scheduler-name"
    assert "--kubeconfig" in sections["Cluster connection"]
    assert {"--leader-elect", "--lease-name", "--lease-namespace", "--lease-duration"} <= set(
        sections["Leader election"]
    )
    assert {"--liveness-port", "--metrics-port", "--log-format"} <= set(sections["Observability"])
    assert "--concurrency" in sections["Performance"]
    # Hidden fault-injection options stay hidden.
    assert "--fault-bind-delay-seconds" not in text


def test_every_visible_run_option_is_in_exactly_one_named_section() -> None:
    command = run_command()
    assert isinstance(command, cli.SectionedCommand)
    placed = [name for _, names in command.sections for name in names]
    assert len(placed) == len(set(placed)), "an option is in two sections"
    names = {p.name for p in visible_options(command)}
    assert names - set(placed) <= {"help"}, f"not in a section: {sorted(names - set(placed) - {'help'})}"
    assert set(placed) <= names, f"sections name unknown options: {sorted(set(placed) - names)}"


@pytest.mark.parametrize("name", sorted(cli.main.commands))
def test_every_visible_option_of_every_command_has_a_one_line_help(name: str) -> None:
    for option in visible_options(cli.main.commands[name]):
        if option.name == "help":
            continue
        assert option.help, f"{name} --{option.name} has no help"
        assert "\n" not in option.help.strip(), f"{name} --{option.name}: help is not one line"


def test_an_option_outside_every_section_is_still_listed() -> None:
    @click.command(cls=cli.SectionedCommand, sections=(("First", ("alpha",)),))
    @click.option("--alpha", help="A.")
    @click.option("--beta", help="B.")
    def command(**_: Any) -> None:
        """Demo."""

    result = CliRunner().invoke(command, ["--help"])
    sections = help_sections(result.output)
    assert sections["First"] == ["--alpha"]
    assert "--beta" in sections["Other options"]


def test_lease_name_is_its_own_flag_and_the_rbac_names_that_lease() -> None:
    (lease_name,) = [p for p in run_command().params if p.name == "lease_name"]
    assert lease_name.default == cli.DEFAULT_LEASE_NAME == "gangsched"
    role = next(
        doc
        for doc in yaml.safe_load_all((ROOT / "manifests" / "role-leader-election.yaml").read_text())
        if doc and doc["kind"] == "Role"
    )
    named = [rule for rule in role["rules"] if rule.get("resourceNames")]
    assert [rule["resourceNames"] for rule in named] == [[cli.DEFAULT_LEASE_NAME]]
    # The Deployment passes neither name: the defaults, and so the Role, hold.
    deployment = yaml.safe_load((ROOT / "manifests" / "deployment.yaml").read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert not any(str(arg).startswith("--lease-name") for arg in container["args"])


def test_version_text_names_the_version_and_the_api_versions() -> None:
    text = invoke("version")
    assert text.splitlines()[0] == f"gangsched {__version__}"
    for expected in (
        "scheduling.gangsched.io/v1alpha1 PodGroup",
        "core/v1 Pod",
        "core/v1 Binding",
        "core/v1 Event",
        "core/v1 Node",
        "scheduling.k8s.io/v1 PriorityClass",
        "policy/v1 PodDisruptionBudget",
        "resource.k8s.io/v1 ResourceClaim",
        "coordination.k8s.io/v1 Lease",
    ):
        assert expected in text


def test_version_json() -> None:
    data = json.loads(invoke("version", "-o", "json"))
    assert data["version"] == __version__
    by_kind = {(a["group"], a["version"], a["kind"]) for a in data["apis"]}
    assert ("coordination.k8s.io", "v1", "Lease") in by_kind
    assert ("scheduling.gangsched.io", "v1alpha1", "PodGroup") in by_kind
    assert ("", "v1", "Binding") in by_kind
    assert all(a["verbs"] for a in data["apis"])


def rbac_rules() -> set[tuple[str, str, str]]:
    """(group, resource, verb) granted by the manifests' ClusterRole and leader-election Role."""
    granted: set[tuple[str, str, str]] = set()
    for name in ("clusterrole.yaml", "role-leader-election.yaml"):
        for doc in yaml.safe_load_all((ROOT / "manifests" / name).read_text()):
            if not doc or doc["kind"] not in ("ClusterRole", "Role"):
                continue
            for rule in doc["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        granted.update((group, resource, verb) for verb in rule["verbs"])
    return granted


def test_the_api_list_matches_the_rbac_verb_for_verb() -> None:
    listed = {
        (use.group, use.resource, verb)
        for use in apis.USED_APIS
        if use.used_by == "run"
        for verb in use.verbs
    }
    assert listed == rbac_rules()
