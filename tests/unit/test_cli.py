"""`gangsched run` options: safe defaults (issue 10.3 and 10.10)."""

from __future__ import annotations

import logging

import pytest
from click.testing import CliRunner

from gangsched import cli


def options(monkeypatch: pytest.MonkeyPatch, *args: str, in_pod: bool = False) -> object:
    captured: list[object] = []
    monkeypatch.setattr("gangsched.runtime.run", captured.append)
    if in_pod:
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    else:
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    result = CliRunner().invoke(cli.main, ["run", *args])
    assert result.exit_code == 0, result.output
    (opts,) = captured
    return opts


def test_leader_election_is_on_by_default_with_its_own_lease_name(monkeypatch: pytest.MonkeyPatch) -> None:
    opts = options(monkeypatch, "--scheduler-name", "other", "--namespace", "team-a")
    lease = opts.lease  # type: ignore[attr-defined]
    assert lease is not None
    assert (lease.name, lease.namespace) == ("gangsched", "default")  # not the scheduler name or namespaces


def test_no_leader_elect_warns_that_only_one_instance_may_run(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        opts = options(monkeypatch, "--no-leader-elect")
    assert opts.lease is None  # type: ignore[attr-defined]
    assert "only one gangsched instance may run" in caplog.text


@pytest.mark.parametrize(("in_pod", "expected"), [(True, "0.0.0.0"), (False, "127.0.0.1")])
def test_endpoints_bind_all_interfaces_only_in_a_pod(
    monkeypatch: pytest.MonkeyPatch, in_pod: bool, expected: str
) -> None:
    assert options(monkeypatch, in_pod=in_pod).bind_address == expected  # type: ignore[attr-defined]
    explicit = options(monkeypatch, "--bind-address", "10.1.2.3", in_pod=in_pod)
    assert explicit.bind_address == "10.1.2.3"  # type: ignore[attr-defined]


def test_every_run_option_has_a_one_line_help() -> None:
    command = cli.main.commands["run"]
    for param in command.params:
        if getattr(param, "hidden", False) or param.name == "help":
            continue
        assert getattr(param, "help", None), f"--{param.name} has no help"
