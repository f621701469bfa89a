"""Automatic gangs in the loop: the writes that form a workload's gang, and the pods held meanwhile.

The policy is pure (`loop.formation`: a `Formation` says each pod's next step,
`replacement` when a PodGroup of ours no longer matches its owner); this module makes the
writes it calls for, through the binder, and tells the queue which pods wait. Each cycle,
before the queue is built, `hold` asks it for every pending pod of ours with a controller and
no PodGroup of its own yet:

- `CreatePodGroup`: create it (controlled by the top owner, labelled managed-by); the pod
  waits;
- `JoinPodGroup`: label the pod with its name (merge patch, its UID as precondition); a
  member at once (the cache's `join`), bound only once its label is written (`LabelStep`);
- `Waiting`: it waits, with why; the owner gets a Warning Event for a problem on it, the pod
  a FailedScheduling Event once a wait lasts.

A held pod is never scheduled alone: it becomes a gated decision (`Reason.WAITING_FOR_GANG`).
What a write returns is applied to the cache at once (the store never goes back to an older
version), so a gang waits one round trip per step, not one watch echo. A failed write is
tried again after a backoff (1 s doubling to 30 s), and the pods it holds are decided again
then through the queue (`Backoff.touch`): their reason says the last try failed.
`review` replaces a PodGroup of ours whose owner now makes another gang (a Job whose
parallelism changed) while none of its members is bound; its group is kept out of the cycle
meanwhile (`replacing`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from gangsched.binder import owner_event_ref, pod_ref
from gangsched.cluster import ClusterCache, Key
from gangsched.cluster.cache import NO_HOLDS, Holds
from gangsched.cluster.kinds import POD, POD_GROUP
from gangsched.cluster.store import Role
from gangsched.loop.backoff import Backoff
from gangsched.loop.context import LoopContext
from gangsched.loop.formation import CreatePodGroup, Formation, JoinPodGroup, replacement
from gangsched.loop.pipeline import GangPlan
from gangsched.loop.report import Reporter
from gangsched.model import POD_GROUP_LABEL, EventReason, Pod, PodGroup, PodGroupApi
from gangsched.model.owners import AutomaticGang, Waiting, pod_group_manifest
from gangsched.session import ApiError
from gangsched.transport import FencedError

log = logging.getLogger(__name__)

# A wait that lasts this long (an owner the cache does not know) is told on the pod; shorter
# ones are the ordinary moment between a pod's event and its owner's.
_TELL_AFTER_SECONDS = 5.0
# After a failed write, the next try waits this long, doubling up to the maximum.
_RETRY_SECONDS = (1.0, 30.0)


def not_served(cache: ClusterCache) -> str | None:
    """Why no PodGroup of ours can be made: gangsched's PodGroups are not served (None: they are)."""
    if cache.serves(POD_GROUP.name):
        return None
    return (
        f"gangsched's PodGroups ({POD_GROUP.api_version()}) are not served: install its CRD "
        "(kubectl apply -f crds/)"
    )


@dataclass(slots=True)
class _Backoff:
    until: float
    delay: float
    error: str


class GangFormation:
    """Forms automatic gangs: PodGroups created and replaced, pods labelled, pods held."""

    def __init__(
        self,
        ctx: LoopContext,
        reporter: Reporter,
        backoff: Backoff,
    ) -> None:
        self.cache = ctx.cache
        self.backoff = backoff
        self.clock = ctx.clock
        self.binder = ctx.binder
        self.reporter = reporter
        self.tasks = ctx.tasks
        self.config = ctx.config
        self.wake = ctx.wake
        self.wake_later = ctx.wake_later
        self._creating: set[Key] = set()  # PodGroups being created
        self._labelling: dict[Key, asyncio.Event] = {}  # pods being labelled: set when answered
        self._replacing: dict[Key, str] = {}  # PodGroups being deleted to be replaced: key -> UID
        self._failed: dict[Key, _Backoff] = {}  # a PodGroup's or pod's last failed write
        self._warned: dict[str, str] = {}  # owner UID -> the problem it was told of
        self._waiting: dict[Key, tuple[str, float]] = {}  # held pod -> (why, since)
        self._told: dict[Key, str] = {}  # pod -> the wait it was told of
        # What each write holds: a PodGroup's (or a pod's) key -> the pods held for it.
        self._held_for: dict[Key, set[Key]] = {}
        self._reviewed = -1  # the cache's change count `review` last looked at

    @property
    def replacing(self) -> Iterable[Key]:
        """Groups whose PodGroup is being replaced: not decided until it is."""
        return self._replacing.keys()

    # ------------------------------------------------------------------ each cycle

    def hold(self, pods: Iterable[Pod], now: float, holds: Holds = NO_HOLDS) -> dict[Key, str]:
        """The pending pods of automatic gangs not formed yet, with why each waits; starts
        the writes that form them (none while a kind formation reads is stale: `holds`)."""
        cache = self.cache
        stale = holds.why(Role.CLUSTER, Role.POD_GROUPS, Role.OWNERS) if holds.formation else None
        formation = Formation(
            cache.owners,
            lambda key: cache.pod_group_of(key, PodGroupApi.GANGSCHED),
            scheduler_name=self.config.scheduler_name,
            blocked=not_served(cache),
        )
        held: dict[Key, str] = {}
        self._held_for = {}
        joining: dict[Key, tuple[AutomaticGang, list[Pod]]] = {}
        for pod in pods:
            if (
                pod.terminal
                or pod.deleting
                or pod.controller is None
                or not self.config.in_scope(pod.namespace)
            ):
                continue
            if pod.node_name and (pod.pod_group is not None or cache.joined(pod.key) is None):
                continue  # bound: only a joined member's label is still ours to write
            step = formation.step(pod)
            if not isinstance(step, JoinPodGroup):
                cache.unjoin(pod.key)  # its gang's PodGroup is gone, or not this owner's
            if step is None:
                continue
            if isinstance(step, Waiting):
                held[pod.key] = step.reason
                self._wait(pod, step, now)
                continue
            gang = step.gang
            if stale is not None:
                held[pod.key] = (
                    f"forming its gang (PodGroup {gang.namespace}/{gang.name}): waiting for the "
                    f"watches to be current again ({stale})"
                )
                continue
            writer = gang.key if isinstance(step, CreatePodGroup) else pod.key
            failed = self._failed.get(writer)
            if isinstance(step, CreatePodGroup):
                held[pod.key] = step.reason
                self._held_for.setdefault(writer, set()).add(pod.key)
                if gang.key not in self._creating and (failed is None or failed.until <= now):
                    self._creating.add(gang.key)
                    self.tasks.spawn(self._create(gang), name=f"create PodGroup {gang.namespace}/{gang.name}")
                if failed is not None:
                    held[pod.key] += f" (the last try failed: {failed.error}; trying again)"
                continue
            # A member from now on (the cache's `join`): decided with its gang while its
            # label is written, as a bound pod is assumed bound before the watch says so.
            cache.join(pod.key, gang.name)
            if pod.key not in self._labelling and (failed is None or failed.until <= now):
                self._labelling[pod.key] = asyncio.Event()
                joining.setdefault(gang.key, (gang, []))[1].append(pod)
        for gang, members in joining.values():
            self.tasks.spawn(self._label(gang, members), name=f"label pods of {gang.namespace}/{gang.name}")
        for key in [k for k in self._waiting if k not in held]:
            del self._waiting[key]
        return held

    def review(self, binding: Callable[[Key], bool], holds: Holds = NO_HOLDS) -> None:
        """Replace each PodGroup of ours whose owner now makes another gang, while none of its
        members is bound (`model.owners.replacement`). Looks only when the cache changed, and
        never while a kind it reads is stale."""
        cache = self.cache
        if cache.changes == self._reviewed or holds.formation:
            return
        self._reviewed = cache.changes
        for key, group in cache.pod_groups.items():
            if (
                not group.managed
                or group.api is not PodGroupApi.GANGSCHED
                or key in self._replacing
                or not self.config.in_scope(key[0])
                or binding(key)
                or cache.pending_binds(key)
            ):
                continue
            gang = replacement(group, cache.owners, cache.members(key, assumed=True))
            if gang is None:
                continue
            self._replacing[key] = group.uid
            self.tasks.spawn(self._replace(group, gang), name=f"replace PodGroup {key[0]}/{key[1]}")

    # ------------------------------------------------------------------ writes

    async def _create(self, gang: AutomaticGang) -> None:
        key = gang.key
        what = f"could not create PodGroup {key[0]}/{key[1]}"
        try:
            body = await self.binder.create_pod_group(pod_group_manifest(gang))
        except ApiError as exc:
            if exc.status != 409:  # 409: one of that name exists; the watch shows which
                self._retry(key, exc.message, what)
        except FencedError as exc:
            self._retry(key, str(exc), what)
        except Exception as exc:
            self._retry(key, f"{type(exc).__name__}: {exc}", what)
        else:
            self._failed.pop(key, None)
            self.cache.apply(POD_GROUP.name, "ADDED", body)
            log.info("created PodGroup %s/%s (minCount %d) for %s", *key, gang.min_count, _owner(gang))
            self.reporter.post(
                owner_event_ref(gang.owner, gang.namespace),
                "Normal",
                EventReason.GANG_CREATED,
                f"created PodGroup {gang.name} (minCount {gang.min_count}): its pods are scheduled "
                "together or not at all",
            )
        finally:
            self._creating.discard(key)
            self.wake(key)

    async def _label(self, gang: AutomaticGang, pods: list[Pod]) -> None:
        try:
            await asyncio.gather(*(self._label_one(pod, gang.name) for pod in pods))
        finally:
            self.wake(gang.key)

    async def _label_one(self, pod: Pod, group: str) -> None:
        what = f"could not label pod {pod.namespace}/{pod.name} into PodGroup {group}"
        try:
            body = await self.binder.label_pod(pod, {POD_GROUP_LABEL: group})
        except ApiError as exc:
            if exc.status in (404, 409):  # gone, or another pod of that name: not a member
                self.cache.unjoin(pod.key)
            else:
                self._retry(pod.key, exc.message, what)
        except FencedError as exc:
            self._retry(pod.key, str(exc), what)
        except Exception as exc:
            self._retry(pod.key, f"{type(exc).__name__}: {exc}", what)
        else:
            self._failed.pop(pod.key, None)
            self.cache.apply(POD.name, "MODIFIED", body)
        finally:
            done = self._labelling.pop(pod.key, None)
            if done is not None:
                done.set()

    async def labelled(self, pods: Sequence[Pod]) -> str | None:
        """Every joined pod of `pods` labelled (the writes in flight awaited, the missing ones
        sent now): a member is never bound before its label is written, so whoever sees it
        bound sees it in its gang. None when done, else why not."""
        waits = [self._labelling[p.key].wait() for p in pods if p.key in self._labelling]
        if waits:
            await asyncio.gather(*waits)
        missing = []
        for pod in pods:
            group = self.cache.joined(pod.key)
            if group is not None and pod.key not in self._labelling:
                self._labelling[pod.key] = asyncio.Event()
                missing.append(self._label_one(pod, group))
        if missing:
            await asyncio.gather(*missing)
        unlabelled = [p for p in pods if self.cache.joined(p.key) is not None]
        if not unlabelled:
            return None
        failed = self._failed.get(unlabelled[0].key)
        why = failed.error if failed is not None else "the write did not land"
        names = ", ".join(p.name for p in unlabelled[:3]) + (" ..." if len(unlabelled) > 3 else "")
        return f"could not label {len(unlabelled)} pod(s) ({names}): {why}"

    async def _replace(self, group: PodGroup, gang: AutomaticGang) -> None:
        key = group.key
        assert group.spec is not None
        try:
            await self.binder.delete_pod_group(group.namespace, group.name, group.uid)
        except ApiError as exc:
            if exc.status not in (404, 409):
                log.warning("could not replace PodGroup %s/%s: %s", *key, exc.message)
                self.wake_later(_RETRY_SECONDS[0])
        except Exception as exc:
            log.warning("could not replace PodGroup %s/%s: %s", *key, exc)
            self.wake_later(_RETRY_SECONDS[0])
        else:
            self.cache.remove(POD_GROUP.name, key)
            message = (
                f"replaced PodGroup {group.name}: {_owner(gang)} now makes a gang of minCount "
                f"{gang.min_count} (was {group.spec.min_count}); none of its pods was bound"
            )
            log.info("%s/%s: %s", group.namespace, group.name, message)
            self.reporter.post(
                owner_event_ref(gang.owner, gang.namespace), "Normal", EventReason.GANG_REPLACED, message
            )
        finally:
            self._replacing.pop(key, None)
            self.wake(key)

    def _retry(self, key: Key, error: str, what: str) -> None:
        previous = self._failed.get(key)
        delay = _RETRY_SECONDS[0] if previous is None else min(previous.delay * 2, _RETRY_SECONDS[1])
        self._failed[key] = _Backoff(until=self.clock() + delay, delay=delay, error=error)
        log.warning("%s: %s (trying again in %.0f s)", what, error, delay)
        # What the pods it holds wait for changed (their reason says the try failed), and
        # again when the backoff ends: decided again then, through the queue.
        held = self._held_for.get(key, {key})
        self.backoff.touch(held)
        self.wake(None)
        self.wake_later(delay)

    # ------------------------------------------------------------------ telling

    def _wait(self, pod: Pod, waiting: Waiting, now: float) -> None:
        """A pod that waits: the owner is warned of a problem on it (once per problem); the
        pod is told once its wait lasts (at once when the owner is warned)."""
        if waiting.warn is not None and self._warned.get(waiting.warn.uid) != waiting.reason:
            self._warned[waiting.warn.uid] = waiting.reason
            log.warning("%s %s/%s: %s", waiting.warn.kind, pod.namespace, waiting.warn.name, waiting.reason)
            self.reporter.post(
                owner_event_ref(waiting.warn, pod.namespace),
                "Warning",
                waiting.problem or EventReason.FAILED_SCHEDULING,
                waiting.reason,
            )
        since = self._waiting.get(pod.key)
        if since is None or since[0] != waiting.reason:
            since = self._waiting[pod.key] = (waiting.reason, now)
        lasting = waiting.warn is not None or now - since[1] >= _TELL_AFTER_SECONDS
        if lasting and self._told.get(pod.key) != waiting.reason:
            self._told[pod.key] = waiting.reason
            self.reporter.post(pod_ref(pod), "Warning", EventReason.FAILED_SCHEDULING, waiting.reason)
        elif not lasting:
            self.wake_later(_TELL_AFTER_SECONDS)

    def collect(self, pod_exists: Callable[[Key], bool]) -> None:
        """Drop what is remembered about pods that no longer exist."""
        for table in (self._told, self._failed):
            for key in [k for k in table if not pod_exists(k) and k not in self.cache.pod_groups]:
                del table[key]
        owners = {pod.controller.uid for pod in self.cache.pods.values() if pod.controller is not None}
        for uid in [u for u in self._warned if u not in owners and self.cache.owners.get(u) is None]:
            del self._warned[uid]


def _owner(gang: AutomaticGang) -> str:
    return gang.describe_owner()


class LabelStep:
    """The pipeline's first step for a gang with joined members: their labels written (or
    awaited) before any Binding (`GangFormation.labelled`)."""

    name = "pod-group labels"

    def __init__(self, gangs: GangFormation) -> None:
        self.gangs = gangs

    async def run(self, plan: GangPlan) -> str | None:
        return await self.gangs.labelled([pod for pod, _ in plan.assignments])

    async def undo(self, plan: GangPlan) -> None:
        return None  # a label names the gang the pod is in whatever happens to this placement

    async def finish(self, plan: GangPlan, unbound: Sequence[Pod]) -> None:
        return None
