"""crds/podgroup.yaml on a real kube-apiserver: it installs, serves, defaults and validates.

(Not named test_crd.py: tests/unit/test_crd.py exists, and without __init__.py files pytest
cannot collect two test modules with one basename.)

The CRD is cluster-scoped and shared by the session: it is created idempotently (409 is
fine) and never deleted, so later tests (the operator's) find it installed.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gangsched.model import GROUP, PLURAL, VERSION
from gangsched_testing.builders import pod_group_manifest
from gangsched_testing.crd_cases import EXAMPLE_SPEC, INVALID_SPECS, UPDATES, VALID_SPECS
from gangsched_testing.rawapi import request_json

pytestmark = pytest.mark.integration

CRD_PATH = Path(__file__).resolve().parents[2] / "crds" / "podgroup.yaml"
CRD_NAME = f"{PLURAL}.{GROUP}"
ESTABLISH_TIMEOUT = 30.0


def _established(ext: client.ApiextensionsV1Api) -> bool:
    crd = ext.read_custom_resource_definition(name=CRD_NAME)
    conditions = {c.type: c.status for c in (crd.status.conditions or [])} if crd.status else {}
    return conditions.get("Established") == "True" and conditions.get("NamesAccepted") == "True"


@pytest.fixture(scope="module")
def podgroup_crd(admin_api: client.ApiClient) -> str:
    """Apply crds/podgroup.yaml (idempotently) and wait until it is Established and served."""
    ext = client.ApiextensionsV1Api(admin_api)
    body = yaml.safe_load(CRD_PATH.read_text())
    try:
        ext.create_custom_resource_definition(body=body)
    except ApiException as exc:
        if exc.status != 409:
            raise
    deadline = time.monotonic() + ESTABLISH_TIMEOUT
    while not _established(ext):
        assert time.monotonic() < deadline, f"{CRD_NAME} not Established after {ESTABLISH_TIMEOUT}s"
        time.sleep(0.1)
    # Established can precede the resource showing up in discovery by a moment.
    while True:
        try:
            resources = request_json(admin_api, "GET", f"/apis/{GROUP}/{VERSION}")["resources"]
        except ApiException as exc:
            if exc.status != 404:
                raise
            resources = []
        if {PLURAL, f"{PLURAL}/status"} <= {r["name"] for r in resources}:
            return CRD_NAME
        assert time.monotonic() < deadline, f"{GROUP}/{VERSION} {PLURAL} not served"
        time.sleep(0.1)


@pytest.fixture
def objects(admin_api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(admin_api)


def _podgroup(name: str, spec: Any) -> dict[str, Any]:
    return pod_group_manifest(name, namespace=None, spec=spec)


def _create(objects: client.CustomObjectsApi, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    created: Any = objects.create_namespaced_custom_object(
        group=GROUP, version=VERSION, namespace=namespace, plural=PLURAL, body=body
    )
    assert isinstance(created, dict)
    return created


def test_crd_names(podgroup_crd: str, admin_api: client.ApiClient) -> None:
    crd = client.ApiextensionsV1Api(admin_api).read_custom_resource_definition(name=podgroup_crd)
    assert crd.spec.scope == "Namespaced"
    assert crd.status is not None
    names = crd.status.accepted_names
    assert names is not None
    assert (names.kind, names.list_kind, names.plural, names.singular) == (
        "PodGroup",
        "PodGroupList",
        "podgroups",
        "podgroup",
    )
    assert names.short_names == ["pg"]
    [version] = crd.spec.versions
    assert (version.name, version.served, version.storage) == (VERSION, True, True)


def test_valid_podgroup_is_created_and_defaulted(
    podgroup_crd: str, objects: client.CustomObjectsApi, namespace: str
) -> None:
    created = _create(objects, namespace, _podgroup("train", EXAMPLE_SPEC))
    spec = created["spec"]
    assert spec["schedulingPolicy"] == {"gang": {"minCount": 8}}
    assert spec["schedulingConstraints"]["topology"] == [
        {"key": "example.com/block", "mode": "Required"},  # defaulted
        {"key": "example.com/rack", "mode": "Preferred"},
    ]
    assert spec["priorityClassName"] == "high"
    assert spec["scheduleTimeoutSeconds"] == 600
    basic = _create(objects, namespace, _podgroup("basic", {"schedulingPolicy": {"basic": {}}}))
    assert basic["spec"]["schedulingPolicy"] == {"basic": {}}


def test_unknown_fields_are_pruned(
    podgroup_crd: str, objects: client.CustomObjectsApi, namespace: str
) -> None:
    spec = copy.deepcopy(EXAMPLE_SPEC)
    spec["someFutureField"] = True
    spec["schedulingPolicy"]["gang"]["maxCount"] = 10
    created = _create(objects, namespace, _podgroup("pruned", spec))
    assert "someFutureField" not in created["spec"]
    assert created["spec"]["schedulingPolicy"] == {"gang": {"minCount": 8}}


def test_status_subresource_and_printer_columns(
    podgroup_crd: str, objects: client.CustomObjectsApi, admin_api: client.ApiClient, namespace: str
) -> None:
    _create(objects, namespace, _podgroup("train", EXAMPLE_SPEC))
    status = {
        "phase": "Scheduled",
        "observedGeneration": 1,
        "conditions": [
            {
                "type": "PodGroupScheduled",
                "status": "True",
                "reason": "Scheduled",
                "message": "placed 8/8 pending pods",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
                "observedGeneration": 1,
            }
        ],
        "pods": 8,
        "scheduled": 8,
        "running": 2,
        "succeeded": 0,
        "failed": 0,
        "domain": "example.com/block=b0",
        "scheduledTime": "2026-01-01T00:00:00Z",
        "lastScheduleTime": "2026-01-01T00:00:00Z",
    }
    patched: Any = objects.patch_namespaced_custom_object_status(
        group=GROUP,
        version=VERSION,
        namespace=namespace,
        plural=PLURAL,
        name="train",
        body={"status": status},
    )
    assert patched["status"] == status
    # The main resource ignores status; the status subresource ignores spec.
    assert patched["metadata"]["generation"] == 1

    table = request_json(
        admin_api,
        "GET",
        f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}",
        accept="application/json;as=Table;v=v1;g=meta.k8s.io",
    )
    columns = [c["name"] for c in table["columnDefinitions"]]
    assert columns == ["Name", "MinCount", "Phase", "Scheduled", "Running", "Domain", "Age"]
    [row] = table["rows"]
    assert row["cells"][:6] == ["train", 8, "Scheduled", 8, 2, "example.com/block=b0"]


def test_invalid_status_is_rejected(
    podgroup_crd: str, objects: client.CustomObjectsApi, namespace: str
) -> None:
    _create(objects, namespace, _podgroup("train", EXAMPLE_SPEC))
    with pytest.raises(ApiException) as info:
        objects.patch_namespaced_custom_object_status(
            group=GROUP,
            version=VERSION,
            namespace=namespace,
            plural=PLURAL,
            name="train",
            body={"status": {"phase": "Done"}},
        )
    assert info.value.status == 422


@pytest.mark.parametrize("case", list(VALID_SPECS))
def test_valid_podgroups_are_accepted(
    podgroup_crd: str, objects: client.CustomObjectsApi, namespace: str, case: str
) -> None:
    created = _create(objects, namespace, _podgroup(case, VALID_SPECS[case]))
    assert created["spec"]["schedulingPolicy"] == VALID_SPECS[case]["schedulingPolicy"]
    # Kept, not pruned (and not defaulted: the default depends on the policy).
    assert created["spec"].get("disruptionMode") == VALID_SPECS[case].get("disruptionMode")


@pytest.mark.parametrize("case", list(INVALID_SPECS))
def test_invalid_podgroups_are_rejected(
    podgroup_crd: str, objects: client.CustomObjectsApi, namespace: str, case: str
) -> None:
    expected = INVALID_SPECS[case].apiserver
    with pytest.raises(ApiException) as info:
        _create(objects, namespace, _podgroup(case, INVALID_SPECS[case].spec))
    assert info.value.status == 422, info.value.body
    message = json.loads(info.value.body or "{}")["message"]
    assert expected in message, message


def _rejected(call: Any) -> str:
    with pytest.raises(ApiException) as caught:
        call()
    assert caught.value.status == 422, caught.value
    return str(caught.value.body)


def test_a_name_that_cannot_be_a_label_value_is_rejected(
    podgroup_crd: str, objects: client.CustomObjectsApi, namespace: str
) -> None:
    """Issue 10.7: pods join with the label scheduling.gangsched.io/pod-group=<name>."""
    body = _rejected(lambda: _create(objects, namespace, _podgroup("g" * 64, EXAMPLE_SPEC)))
    assert "at most 63 characters" in body
    _create(objects, namespace, _podgroup("g" * 63, EXAMPLE_SPEC))


@pytest.mark.parametrize("case", list(UPDATES))
def test_the_gang_fields_are_immutable(
    podgroup_crd: str, objects: client.CustomObjectsApi, namespace: str, case: str
) -> None:
    """Issue 10.6: raising minCount on a running gang made it partial, then rolled it back.
    The timeout is not a gang field: it may change (crd_cases.UPDATES)."""
    update = UPDATES[case]
    created = _create(objects, namespace, _podgroup("train", update.before))
    changed = copy.deepcopy(created)
    changed["spec"] = copy.deepcopy(update.after)

    def replace() -> Any:
        return objects.replace_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "train", changed)

    if update.refused is None:
        assert replace()["spec"]["scheduleTimeoutSeconds"] == update.after["scheduleTimeoutSeconds"]
    else:
        assert update.refused in _rejected(replace)
