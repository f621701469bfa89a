"""An `Owner` from an object read from the API (a watch, a LIST, a file)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gangsched.model.common import (
    NAMESPACE_DEFAULT,
    ModelError,
    OwnerRef,
    controller_ref,
    object_field,
    object_meta,
    str_map,
)
from gangsched.model.owners.rule import Owner
from gangsched.model.owners.table import rule_for


def parse_owner(body: Mapping[str, Any]) -> Owner:
    """An `Owner` from an object read from the API; ModelError (naming the field) when the
    metadata, or for a kind of the table the spec fields its rule reads, are malformed."""
    if not isinstance(body, Mapping):
        raise ModelError("an owner must be an object")
    api_version = body.get("apiVersion")
    kind_name = body.get("kind")
    if not isinstance(api_version, str) or not api_version:
        raise ModelError("apiVersion is required")
    if not isinstance(kind_name, str) or not kind_name:
        raise ModelError("kind is required")
    meta = object_meta(body)
    uid = meta.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ModelError("metadata.uid is required")
    rule = rule_for(api_version, kind_name)
    return Owner(
        api_version=api_version,
        kind=kind_name,
        namespace=str(meta.get("namespace") or NAMESPACE_DEFAULT),
        name=str(meta["name"]),
        uid=uid,
        annotations=str_map(meta.get("annotations"), "metadata.annotations"),
        labels=str_map(meta.get("labels"), "metadata.labels"),
        controller=controller_ref(meta),
        counts=rule.counts(object_field(body.get("spec"), "spec")) if rule is not None else None,
        rule=rule,
    )


def pod_controller(body: Mapping[str, Any]) -> OwnerRef | None:
    """A pod body's controller ownerReference (the one with `controller: true`), if any."""
    return controller_ref(object_meta(body))
