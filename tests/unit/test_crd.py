"""crds/podgroup.yaml: names, printer columns, a structural schema, and what it accepts.

A small validator for the OpenAPI subset the CRD uses (type, required, enum, minimum,
maxItems, ...) checks the issue's example and the invalid specs offline; the two CEL rules
are mirrored in Python, keyed by their exact text so a changed rule fails here until the
mirror is updated. The integration suite applies the same file to a real kube-apiserver,
and sends it the same specs (gangsched_testing.crd_cases).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gangsched.model import GROUP, MAX_TOPOLOGY_LEVELS, PLURAL, VERSION, ModelError, parse_pod_group_spec
from gangsched.model.common import label_key_problem
from gangsched_testing.builders import pod_group_manifest
from gangsched_testing.crd_cases import EXAMPLE_SPEC, INVALID_SPECS, UPDATES, VALID_SPECS

ROOT = Path(__file__).resolve().parents[2]
CRD_PATH = ROOT / "crds" / "podgroup.yaml"
EXAMPLES = ROOT / "examples" / "simulate"

Schema = dict[str, Any]

# The CEL rules of the CRD, mirrored in Python. Transition rules (they read oldSelf) run only
# on updates, which the offline validator does not model: they map to None and are checked
# against the real apiserver (tests/integration/test_podgroup_crd.py).
CEL_RULES: dict[str, Callable[[Any], bool] | None] = {
    "has(self.gang) != has(self.basic)": lambda v: ("gang" in v) != ("basic" in v),
    "self.all(t, self.exists_one(u, u.key == t.key))": lambda v: all(
        sum(1 for u in v if u["key"] == t["key"]) == 1 for t in v
    ),
    "self.metadata.name.size() <= 63": lambda v: len(v["metadata"]["name"]) <= 63,
    (
        r"self.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$')"
        " && self.split('/')[self.split('/').size() - 1].size() <= 63 && "
        "(!self.contains('/') || self.split('/')[0].size() <= 253)"
    ): lambda v: label_key_problem(v) is None,
    "self.schedulingPolicy == oldSelf.schedulingPolicy": None,
    (
        "has(self.schedulingConstraints) == has(oldSelf.schedulingConstraints) && "
        "(!has(self.schedulingConstraints) || self.schedulingConstraints == "
        "oldSelf.schedulingConstraints)"
    ): None,
    (
        "has(self.priorityClassName) == has(oldSelf.priorityClassName) && "
        "(!has(self.priorityClassName) || self.priorityClassName == "
        "oldSelf.priorityClassName)"
    ): None,
    (
        "has(self.priority) == has(oldSelf.priority) && (!has(self.priority) || "
        "self.priority == oldSelf.priority)"
    ): None,
    (
        "has(self.resourceClaims) == has(oldSelf.resourceClaims) && "
        "(!has(self.resourceClaims) || self.resourceClaims == oldSelf.resourceClaims)"
    ): None,
    (
        "has(self.disruptionMode) == has(oldSelf.disruptionMode) && "
        "(!has(self.disruptionMode) || self.disruptionMode == oldSelf.disruptionMode)"
    ): None,
    "has(self.resourceClaimName) != has(self.resourceClaimTemplateName)": lambda v: (
        ("resourceClaimName" in v) != ("resourceClaimTemplateName" in v)
    ),
}


def _unchanged(field: str) -> Callable[[Any, Any], bool]:
    """The mirror of `has(self.f) == has(oldSelf.f) && (!has(self.f) || self.f == oldSelf.f)`."""
    return lambda new, old: (
        (field in new) == (field in old) and (field not in new or new[field] == old[field])
    )


# The transition rules, mirrored for updates (self, oldSelf): `check_update` runs them offline.
TRANSITION_RULES: dict[str, Callable[[Any, Any], bool]] = {
    "self.schedulingPolicy == oldSelf.schedulingPolicy": lambda new, old: (
        new["schedulingPolicy"] == old["schedulingPolicy"]
    ),
    **{
        rule: _unchanged(rule.split(")", 1)[0].removeprefix("has(self."))
        for rule, mirror in CEL_RULES.items()
        if mirror is None and rule.startswith("has(self.")
    },
}

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


# --------------------------------------------------------------------------- the validator


def validate(schema: Schema, value: Any, path: str = "") -> list[str]:
    """Errors of `value` against `schema`; unknown fields count as errors (they would be pruned)."""
    where = path or "<root>"
    kind = schema.get("type")
    if kind == "object":
        if not isinstance(value, dict):
            return [f"{where}: expected object"]
    elif kind == "array":
        if not isinstance(value, list):
            return [f"{where}: expected array"]
    elif kind == "string":
        if not isinstance(value, str):
            return [f"{where}: expected string"]
    elif kind == "integer":
        if not isinstance(value, int) or isinstance(value, bool):
            return [f"{where}: expected integer"]
    elif kind == "boolean":
        if not isinstance(value, bool):
            return [f"{where}: expected boolean"]
    else:
        return [f"{where}: schema node without a known type: {kind!r}"]

    errors: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: unsupported value {value!r}")
    if "minimum" in schema and value < schema["minimum"]:
        errors.append(f"{where}: should be >= {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        errors.append(f"{where}: should be <= {schema['maximum']}")
    bounds = {"int32": INT32, "int64": INT64}.get(schema.get("format", ""))
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        errors.append(f"{where}: out of range for {schema['format']}")
    if "minLength" in schema and len(value) < schema["minLength"]:
        errors.append(f"{where}: shorter than {schema['minLength']}")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(f"{where}: longer than {schema['maxLength']}")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(f"{where}: more than {schema['maxItems']} items")
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        errors.append(f"{where}: fewer than {schema['minProperties']} properties")
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        errors.append(f"{where}: more than {schema['maxProperties']} properties")

    if kind == "object":
        properties: dict[str, Schema] = schema.get("properties", {})
        errors.extend(
            f"{where}: missing required field {name!r}"
            for name in schema.get("required", ())
            if name not in value
        )
        for name, item in value.items():
            if name in properties:
                errors.extend(validate(properties[name], item, f"{path}.{name}"))
            elif properties:  # an object without properties (metadata, basic) takes anything
                errors.append(f"{path}.{name}: unknown field")
    elif kind == "array":
        for i, item in enumerate(value):
            errors.extend(validate(schema["items"], item, f"{path}[{i}]"))

    # As in the apiserver, CEL rules run only on values that passed the rest of the schema.
    if not errors:
        for rule in schema.get("x-kubernetes-validations", ()):
            mirrored = CEL_RULES[rule["rule"]]
            if mirrored is not None and not mirrored(value):
                errors.append(f"{where}: {rule['message']}")
    return errors


def apply_defaults(schema: Schema, value: Any) -> Any:
    """Fill `default`s as the apiserver does before validation (returns a copy)."""
    value = copy.deepcopy(value)
    if schema.get("type") == "object" and isinstance(value, dict):
        for name, sub in schema.get("properties", {}).items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                value[name] = apply_defaults(sub, value[name])
    elif schema.get("type") == "array" and isinstance(value, list):
        value = [apply_defaults(schema["items"], item) for item in value]
    return value


def check_update(schema: Schema, old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Errors of an update from `old` to `new`: the new object's, then the transition rules'.

    Transition rules run where both objects have the node; the CRD has them on spec only."""
    errors = check(schema, new)
    if errors:
        return errors
    spec_schema = schema["properties"]["spec"]
    before, after = apply_defaults(schema, old)["spec"], apply_defaults(schema, new)["spec"]
    for rule in spec_schema.get("x-kubernetes-validations", ()):
        mirror = TRANSITION_RULES.get(rule["rule"])
        if mirror is not None and not mirror(after, before):
            errors.append(f".spec: {rule['message']}")
    return errors


def walk(schema: Schema, path: str = "") -> Iterator[tuple[str, Schema]]:
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from walk(sub, f"{path}.{name}")
    if "items" in schema:
        yield from walk(schema["items"], f"{path}[]")


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def crd() -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(CRD_PATH.read_text()) if d is not None]
    assert len(docs) == 1
    loaded: dict[str, Any] = docs[0]
    return loaded


@pytest.fixture(scope="module")
def version(crd: dict[str, Any]) -> dict[str, Any]:
    [only] = crd["spec"]["versions"]
    return dict(only)


@pytest.fixture(scope="module")
def schema(version: dict[str, Any]) -> Schema:
    return dict(version["schema"]["openAPIV3Schema"])


def podgroup(spec: Any, **extra: Any) -> dict[str, Any]:
    return {**pod_group_manifest("train", spec=spec), **extra}


def check(schema: Schema, obj: dict[str, Any]) -> list[str]:
    return validate(schema, apply_defaults(schema, obj))


# --------------------------------------------------------------------------- names and shape


def test_names(crd: dict[str, Any], version: dict[str, Any]) -> None:
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == f"{PLURAL}.{GROUP}" == "podgroups.scheduling.gangsched.io"
    spec = crd["spec"]
    assert spec["group"] == GROUP
    assert spec["scope"] == "Namespaced"
    assert spec["names"] == {
        "kind": "PodGroup",
        "listKind": "PodGroupList",
        "plural": "podgroups",
        "singular": "podgroup",
        "shortNames": ["pg"],
    }
    assert version["name"] == VERSION
    assert version["served"] is True
    assert version["storage"] is True
    assert version["subresources"] == {"status": {}}


def test_printer_columns(version: dict[str, Any], schema: Schema) -> None:
    columns = {c["name"]: (c["type"], c["jsonPath"]) for c in version["additionalPrinterColumns"]}
    assert columns == {
        "MinCount": ("integer", ".spec.schedulingPolicy.gang.minCount"),
        "Phase": ("string", ".status.phase"),
        "Scheduled": ("integer", ".status.scheduled"),
        "Running": ("integer", ".status.running"),
        "Domain": ("string", ".status.domain"),
        "Age": ("date", ".metadata.creationTimestamp"),
    }
    # Every column but Age points at a schema field of the same type.
    paths = dict(walk(schema))
    for name, (kind, json_path) in columns.items():
        if name != "Age":
            assert paths[json_path]["type"] == kind, name


def test_schema_is_structural(crd: dict[str, Any], schema: Schema) -> None:
    assert crd["spec"].get("preserveUnknownFields", False) is False
    for path, node in walk(schema):
        assert "type" in node, f"{path or '<root>'} has no type"
        # kube-apiserver accepts only `true` or absent here; absent means unknown fields are pruned.
        assert "x-kubernetes-preserve-unknown-fields" not in node, path
        assert "additionalProperties" not in node, path
        if node["type"] == "array":
            assert "items" in node, path
        for name in node.get("required", ()):
            assert name in node.get("properties", {}), f"{path}: required {name} is not a property"
        for rule in node.get("x-kubernetes-validations", ()):
            assert rule["rule"] in CEL_RULES, f"{path}: rule {rule['rule']!r} has no Python mirror here"
            assert rule.get("message"), path
        for key in node.get("x-kubernetes-list-map-keys", ()):
            assert key in node["items"].get("required", ()), f"{path}: list map key {key} must be required"


def test_spec_fields(schema: Schema) -> None:
    paths = dict(walk(schema))
    assert schema["required"] == ["spec"]
    assert paths[".spec"]["required"] == ["schedulingPolicy"]
    policy = paths[".spec.schedulingPolicy"]
    # One CEL rule, not min/maxProperties: those fail first with a vaguer message.
    assert "maxProperties" not in policy
    assert [r["rule"] for r in policy["x-kubernetes-validations"]] == ["has(self.gang) != has(self.basic)"]
    min_count = paths[".spec.schedulingPolicy.gang.minCount"]
    assert (min_count["type"], min_count["format"], min_count["minimum"]) == ("integer", "int32", 1)
    assert paths[".spec.schedulingPolicy.gang"]["required"] == ["minCount"]
    topology = paths[".spec.schedulingConstraints.topology"]
    assert topology["maxItems"] == MAX_TOPOLOGY_LEVELS == 5
    key = paths[".spec.schedulingConstraints.topology[].key"]
    assert (key["type"], key["minLength"], key["maxLength"]) == ("string", 1, 317)
    assert paths[".spec.schedulingConstraints.topology[]"]["required"] == ["key"]
    mode = paths[".spec.schedulingConstraints.topology[].mode"]
    assert (mode["enum"], mode["default"]) == (["Required", "Preferred"], "Required")
    assert paths[".spec.priorityClassName"]["type"] == "string"
    assert paths[".spec.priority"]["format"] == "int32"
    assert paths[".spec.scheduleTimeoutSeconds"]["minimum"] == 1
    disruption = paths[".spec.disruptionMode"]
    assert disruption["enum"] == ["PodGroup", "Pod"]
    # Its default depends on the policy (PodGroup for gangs, Pod for basic groups): the model's.
    assert "default" not in disruption


def test_status_fields(schema: Schema) -> None:
    paths = dict(walk(schema))
    assert paths[".status.phase"]["enum"] == [
        "Pending",
        "Scheduling",
        "Scheduled",
        "Running",
        "Succeeded",
        "Failed",
        "Unschedulable",
    ]
    assert paths[".status.observedGeneration"]["format"] == "int64"
    for count in ("pods", "scheduled", "running", "succeeded", "failed"):
        assert paths[f".status.{count}"]["type"] == "integer"
        assert paths[f".status.{count}"]["format"] == "int32"
    assert paths[".status.domain"]["type"] == "string"
    for stamp in ("scheduledTime", "lastScheduleTime"):
        assert paths[f".status.{stamp}"]["format"] == "date-time"
    assert "required" not in paths[".status"]
    conditions = paths[".status.conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    condition = paths[".status.conditions[]"]
    assert set(condition["properties"]) == {
        "type",
        "status",
        "reason",
        "message",
        "lastTransitionTime",
        "observedGeneration",
    }
    assert set(condition["required"]) == {"type", "status", "reason", "message", "lastTransitionTime"}


# --------------------------------------------------------------------------- what it accepts


def test_accepts_the_issue_example(schema: Schema) -> None:
    assert check(schema, podgroup(EXAMPLE_SPEC)) == []
    defaulted = apply_defaults(schema, podgroup(EXAMPLE_SPEC))
    modes = [t["mode"] for t in defaulted["spec"]["schedulingConstraints"]["topology"]]
    assert modes == ["Required", "Preferred"]


@pytest.mark.parametrize("name", list(VALID_SPECS))
def test_accepts_valid_specs(schema: Schema, name: str) -> None:
    spec = VALID_SPECS[name]
    assert check(schema, podgroup(spec)) == []
    parse_pod_group_spec(spec)  # the model agrees


def test_accepts_a_full_status(schema: Schema) -> None:
    status = {
        "phase": "Scheduled",
        "observedGeneration": 3,
        "conditions": [
            {
                "type": "PodGroupScheduled",
                "status": "True",
                "reason": "Scheduled",
                "message": "placed 8/8 pending pods",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
                "observedGeneration": 3,
            }
        ],
        "pods": 8,
        "scheduled": 8,
        "running": 0,
        "succeeded": 0,
        "failed": 0,
        "domain": "example.com/block=b0",
        "scheduledTime": "2026-01-01T00:00:00Z",
        "lastScheduleTime": "2026-01-01T00:00:00Z",
    }
    assert check(schema, podgroup(EXAMPLE_SPEC, status=status)) == []
    assert check(schema, podgroup(EXAMPLE_SPEC, status={**status, "phase": "Done"}))


@pytest.mark.parametrize("name", list(INVALID_SPECS))
def test_rejects_invalid_specs(schema: Schema, name: str) -> None:
    case = INVALID_SPECS[name]
    errors = check(schema, podgroup(case.spec))
    assert errors, f"{name} was accepted"
    assert any(case.offline in e for e in errors), errors


@pytest.mark.parametrize("name", [n for n, case in INVALID_SPECS.items() if case.model])
def test_model_rejects_what_the_crd_rejects(name: str) -> None:
    # The simulator reads files the apiserver never saw, so the model enforces the same rules
    # (all but two: see crd_cases.Invalid.model).
    with pytest.raises(ModelError):
        parse_pod_group_spec(INVALID_SPECS[name].spec)


def test_example_podgroups_validate(schema: Schema) -> None:
    groups = [
        doc
        for path in sorted(EXAMPLES.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if isinstance(doc, dict) and doc.get("kind") == "PodGroup"
    ]
    assert len(groups) >= 3
    for group in groups:
        assert check(schema, group) == [], group["metadata"]["name"]


# --------------------------------------------------------------------------- updates


def test_every_transition_rule_has_an_offline_mirror(schema: Schema) -> None:
    for path, node in walk(schema):
        for rule in node.get("x-kubernetes-validations", ()):
            if CEL_RULES[rule["rule"]] is None:
                assert rule["rule"] in TRANSITION_RULES, f"{path}: {rule['rule']!r}"
                assert path == ".spec", "check_update runs transition rules on spec only"


@pytest.mark.parametrize("name", list(UPDATES))
def test_updates(schema: Schema, name: str) -> None:
    case = UPDATES[name]
    errors = check_update(schema, podgroup(case.before), podgroup(case.after))
    if case.refused is None:
        assert errors == []
    else:
        [error] = errors
        assert case.refused in error


def test_the_model_defaults_disruption_mode_by_policy() -> None:
    gang = parse_pod_group_spec(EXAMPLE_SPEC)
    basic = parse_pod_group_spec({"schedulingPolicy": {"basic": {}}})
    assert (gang.disruption_mode, gang.effective_disruption_mode) == (None, "PodGroup")
    assert (basic.disruption_mode, basic.effective_disruption_mode) == (None, "Pod")
    by_pod = parse_pod_group_spec(VALID_SPECS["gang-disrupted-by-pod"])
    assert by_pod.effective_disruption_mode == "Pod"
    whole = parse_pod_group_spec(VALID_SPECS["basic-disrupted-whole"])
    assert whole.effective_disruption_mode == "PodGroup"
    with pytest.raises(ModelError, match=r"spec\.disruptionMode"):
        parse_pod_group_spec(INVALID_SPECS["disruption-mode-bogus"].spec)
