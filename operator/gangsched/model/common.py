"""Names every view shares: the API coordinates, labels, ModelError and the field readers.

Readers raise ModelError with a message that names the field, because users see it verbatim
(a PodGroup condition, a `simulate` error line).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gangsched.quantity import QuantityError, parse_milli

GROUP = "scheduling.gangsched.io"
VERSION = "v1alpha1"
PLURAL = "podgroups"
POD_GROUP_LABEL = f"{GROUP}/pod-group"
# Set on a pod through its Binding: the UID of the PodGroup incarnation we bound it for.
BOUND_FOR_ANNOTATION = f"{GROUP}/bound-for-pod-group"
DEFAULT_SCHEDULER_NAME = "gangsched"

# Automatic gangs (model/owners.py): the label on every PodGroup gangsched creates for a
# workload owner (it never adopts or changes one without it), and the annotations a user
# puts on the top owner to tune or refuse its gang.
MANAGED_BY_LABEL = f"{GROUP}/managed-by"
MANAGED_BY_VALUE = "gangsched"
MIN_COUNT_ANNOTATION = f"{GROUP}/min-count"
TOPOLOGY_ANNOTATION = f"{GROUP}/topology"
SCHEDULE_TIMEOUT_ANNOTATION = f"{GROUP}/schedule-timeout-seconds"
GANG_ANNOTATION = f"{GROUP}/gang"
MAX_TOPOLOGY_LEVELS = 5
PODS = "pods"

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
# The pod watch skips finished pods (server-side): they hold no capacity, and in batch
# clusters they are most of the pods. Finished members of our groups are read separately.
LIVE_PODS_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"

NAMESPACE_DEFAULT = "default"

# An object's (namespace, name): a pod, a PodGroup, a ResourceClaim; namespace "" for a
# cluster-scoped kind. The one name for it, in the engine, the cache and the loop alike.
Key = tuple[str, str]

# Kubernetes' own PodGroup (KEP-4671/5832, alpha in 1.36): pods join it through
# spec.schedulingGroup.podGroupName; served only where scheduling.k8s.io/v1alpha2 is enabled.
NATIVE_GROUP = "scheduling.k8s.io"
NATIVE_VERSION = "v1alpha2"
NATIVE_PLURAL = "podgroups"


class PodGroupApi(StrEnum):
    """The API a PodGroup comes from: gangsched's CRD, or Kubernetes' scheduling.k8s.io/v1alpha2."""

    GANGSCHED = "gangsched"
    NATIVE = "native"

    @property
    def group(self) -> str:
        return GROUP if self is PodGroupApi.GANGSCHED else NATIVE_GROUP

    @property
    def api_version(self) -> str:
        version = VERSION if self is PodGroupApi.GANGSCHED else NATIVE_VERSION
        return f"{self.group}/{version}"

    @property
    def resource(self) -> str:
        """The plural with its group, as kubectl spells it (``podgroups.scheduling.k8s.io``)."""
        return f"{PLURAL}.{self.group}"


_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

LABEL_KEY_RULE = (
    "must be a label key: an optional DNS subdomain prefix (at most 253 characters) and '/', "
    "then a name of at most 63 characters of letters, digits, '-', '_' and '.', beginning and "
    "ending with a letter or digit"
)


def label_key_problem(key: str) -> str | None:
    """Why `key` is not a Kubernetes label key (as the CRD checks it), or None."""
    prefix, slash, name = key.rpartition("/")
    if (
        not _LABEL_NAME.fullmatch(name)
        or len(name) > 63
        or (slash and (not _DNS_SUBDOMAIN.fullmatch(prefix) or len(prefix) > 253))
    ):
        return LABEL_KEY_RULE
    return None


class ModelError(ValueError):
    """An object that cannot be understood; the message names the field and is shown to users."""


def object_meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata") or {}
    if not isinstance(meta, Mapping):
        raise ModelError("metadata must be an object")
    if not meta.get("name"):
        raise ModelError("metadata.name is required")
    return meta


@dataclass(frozen=True, slots=True)
class OwnerRef:
    """One entry of metadata.ownerReferences (an owner is always in the object's namespace)."""

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool = False

    def manifest(self, *, block_owner_deletion: bool = True) -> dict[str, Any]:
        """The ownerReference body, as the controller (controller: true) of a new object."""
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": block_owner_deletion,
        }


def controller_ref(meta: Mapping[str, Any]) -> OwnerRef | None:
    """The controller among metadata.ownerReferences (the one with `controller: true`; the
    apiserver allows at most one), None when there is none."""
    refs = meta.get("ownerReferences")
    if refs is None:
        return None
    if not isinstance(refs, list):
        raise ModelError("metadata.ownerReferences must be a list")
    for i, ref in enumerate(refs):
        if not isinstance(ref, Mapping):
            raise ModelError(f"metadata.ownerReferences[{i}] must be an object")
        if ref.get("controller") is not True:
            continue
        fields = {}
        for name in ("apiVersion", "kind", "name", "uid"):
            value = ref.get(name)
            if not isinstance(value, str) or not value:
                raise ModelError(f"metadata.ownerReferences[{i}].{name} is required")
            fields[name] = value
        return OwnerRef(fields["apiVersion"], fields["kind"], fields["name"], fields["uid"], controller=True)
    return None


def object_field(value: Any, where: str) -> Mapping[str, Any]:
    """An optional object field: {} when absent, a ModelError naming `where` when not an object."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ModelError(f"{where} must be an object")
    return value


def list_field(value: Any, where: str) -> list[Any]:
    """An optional list field: [] when absent, a ModelError naming `where` when not a list."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ModelError(f"{where} must be a list")
    return value


def str_map(value: Any, where: str, *, interned: bool = False) -> dict[str, str]:
    """A map of strings; `interned`: every key and value `sys.intern`ed (labels repeat across
    100,000 pods: one string each instead of one per pod)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ModelError(f"{where} must be a map of strings")
    if interned:
        return {sys.intern(str(k)): sys.intern(str(v)) for k, v in value.items()}
    return {str(k): str(v) for k, v in value.items()}


def quantities(value: Any, where: str) -> dict[str, int]:
    """A map of quantities, each in milli-units."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ModelError(f"{where} must be a map of quantities")
    out: dict[str, int] = {}
    for name, raw in value.items():
        try:
            out[str(name)] = parse_milli(raw)
        except QuantityError as exc:
            raise ModelError(f"{where}.{name}: {exc}") from None
    return out
