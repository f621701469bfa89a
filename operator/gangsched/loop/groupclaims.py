"""Claims of a whole PodGroup (`spec.resourceClaims`, as native v1alpha2 PodGroups, KEP-5729).

A group claim is one claim for all members (an interconnect channel, a shared volume
device). Members use it through a `spec.resourceClaims` entry with `resourceClaimName` set
to the claim's name; the engine treats it as a claim shared by the gang, and `ClaimStep`
reserves it for the PodGroup itself (one reservedFor entry, so more than 256 pods can use
it) before any member is bound.

What this module adds around that, once per cycle:

- **creation**: for a `resourceClaimTemplateName` entry, gangsched creates the claim
  `<podgroup>-<name>` from the template (the resourceclaim controller does this only for native
  PodGroups), owned by the PodGroup so the garbage collector deletes it with the group, and
  annotated `resource.kubernetes.io/pod-claim-name` as upstream does. A fixed name (no
  random suffix) lets pod templates name it.
- **cleanup**: the resourceclaim controller keeps reservedFor entries of kinds it does not
  know, so a claim reserved for our PodGroup would stay allocated forever. When the group is
  deleted (or recreated: another UID) or finished (every member Succeeded or Failed), the
  entry is removed, the claim deallocated and our finalizer removed; a claim gangsched
  created is deleted.

Native PodGroups (scheduling.k8s.io/v1alpha2) take the same path through `ClaimStep`, with
their own reservedFor entry (`{apiGroup: scheduling.k8s.io, resource: podgroups}`); members
use the group's entry as is (template included). Creation and cleanup are the resourceclaim
controller's there (it knows that API): this module leaves them alone.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from gangsched.binder import pod_group_ref
from gangsched.cluster import ClusterCache, Key
from gangsched.loop.claims import ClaimStep
from gangsched.loop.context import LoopContext
from gangsched.loop.report import Reporter
from gangsched.model import GROUP, PLURAL, VERSION, EventReason, PodGroup
from gangsched.session import ApiError

log = logging.getLogger(__name__)

POD_CLAIM_NAME_ANNOTATION: Final = "resource.kubernetes.io/pod-claim-name"
# Marks a claim gangsched created from a group's template (deleted with the group's end).
CREATED_FOR_ANNOTATION: Final = "scheduling.gangsched.io/created-for-podgroup"
# A claim just created is not asked for again before the watch shows it, for this long.
_CREATE_AGAIN_SECONDS = 10.0


def claim_from_template(group: PodGroup, entry_name: str, claim_name: str, template: Any) -> dict[str, Any]:
    """The claim for a group's template entry, as the resourceclaim controller would make it
    for a native PodGroup (but named <podgroup>-<entry>)."""
    meta = template.get("metadata") or {}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": claim_name,
            "namespace": group.namespace,
            "labels": dict(meta.get("labels") or {}),
            "annotations": {
                **(meta.get("annotations") or {}),
                POD_CLAIM_NAME_ANNOTATION: entry_name,
                CREATED_FOR_ANNOTATION: group.uid,
            },
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "PodGroup",
                    "name": group.name,
                    "uid": group.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": (template.get("spec") or {}).get("spec") or {},
    }


class GroupClaims:
    """Creates the claims of PodGroups' template entries and cleans up after groups."""

    def __init__(
        self,
        ctx: LoopContext,
        reporter: Reporter,
        claims: ClaimStep,
    ) -> None:
        self.cache = ctx.cache
        self.live = ctx.live
        self.binder = ctx.binder
        self.reporter = reporter
        self.claims = claims
        self.config = ctx.config
        self.clock = ctx.clock
        self._asked: dict[Key, float] = {}
        self._reported: dict[Key, str] = {}

    async def sync(self) -> None:
        if not self.cache.devices.enabled:
            return
        await self._create()
        await self._clean_up()

    # ------------------------------------------------------------------ creation

    async def _create(self) -> None:
        now = self.clock()
        for key, group in list(self.cache.pod_groups.items()):
            if group.spec is None or not group.spec.resource_claims or not self.config.in_scope(key[0]):
                continue
            if group.is_native:
                continue  # the resourceclaim controller makes a native PodGroup's claims
            if self._finished(key):
                continue
            for entry in group.spec.resource_claims:
                template = entry.resource_claim_template_name
                if template is None:
                    continue
                claim = (group.namespace, entry.claim_name(group.name))
                if (
                    claim in self.cache.devices.claims
                    or now - self._asked.get(claim, -1e9) < _CREATE_AGAIN_SECONDS
                ):
                    continue
                self._asked[claim] = now
                await self._create_one(group, entry.name, claim, template)

    async def _create_one(self, group: PodGroup, entry: str, claim: Key, template_name: str) -> None:
        problem = ""
        try:
            template = await self.live.read_claim_template(group.namespace, template_name)
            if template is None:
                problem = f"ResourceClaimTemplate {template_name} not found"
            else:
                await self.binder.create_claim(claim_from_template(group, entry, claim[1], template))
                log.info(
                    "created ResourceClaim %s/%s for PodGroup %s from %s", *claim, group.name, template_name
                )
                return
        except ApiError as exc:
            if exc.status == 409:
                return  # exists already: the watch brings it
            problem = f"could not create ResourceClaim {claim[1]} from {template_name}: {exc.message}"
        if problem and self._reported.get(claim) != problem:
            self._reported[claim] = problem
            ref = pod_group_ref(group.namespace, group.name, group.uid)
            self.reporter.post(ref, "Warning", EventReason.WAITING_FOR_RESOURCE_CLAIMS, problem)

    # ------------------------------------------------------------------ cleanup

    def _finished(self, key: Key) -> bool:
        members = self.cache.members(key)
        return bool(members) and all(p.terminal for p in members)

    async def _clean_up(self) -> None:
        for key, claim in list(self.cache.devices.claims.items()):
            refs = [r for r in claim.reserved_for if r.api_group == GROUP and r.resource == PLURAL]
            creator = claim.annotations.get(CREATED_FOR_ANNOTATION)
            if not refs and not creator:
                continue
            ended = [r.uid for r in refs if self._ended((claim.namespace, r.name), r.uid)]
            if ended:
                log.info("PodGroup of ResourceClaim %s/%s ended: releasing it", *key)
                await self.claims.release(key, set(ended))
            if not creator or claim.deleting:
                continue
            owner = (claim.namespace, _owner_name(claim.name, creator, self.cache))
            held = [r for r in claim.reserved_for if r.uid not in ended]
            if self._ended(owner, creator) and not held:
                await self._delete(key)

    def _ended(self, group: Key, uid: str) -> bool:
        current = self.cache.pod_groups.get(group)
        return current is None or current.uid != uid or self._finished(group)

    async def _delete(self, key: Key) -> None:
        try:
            await self.binder.delete_claim(*key)
            log.info("deleted ResourceClaim %s/%s: its PodGroup ended", *key)
        except ApiError as exc:
            if exc.status != 404:
                log.warning("could not delete ResourceClaim %s/%s: %s", *key, exc.message)


def _owner_name(claim: str, uid: str, cache: ClusterCache) -> str:
    """The name of the PodGroup (by UID) a claim was created for; the claim's own name when
    that group is gone (so the lookup finds nothing: ended)."""
    for (_, name), group in cache.pod_groups.items():
        if group.uid == uid:
            return name
    return claim  # no PodGroup of that name (one is never named like its own claim's suffix)
