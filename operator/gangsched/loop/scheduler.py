"""The scheduling loop: cache -> engine -> binding pipeline, one asyncio task.

Each cycle: build the queue once from the cache (`engine.queue.build_queue`, from this
scheduler's pods and the groups' members only), keep the groups that may be decided now (not
binding, the backoff is over, the cache has caught up with our own writes for them: else a
live read is started in the background), run the engine in a worker thread on the snapshot
the loop keeps (`cluster.snapshots`: rows of the nodes changed since the last cycle
rewritten, not rebuilt from every pod), record verdicts, and start the binding
pipeline for each decided gang as a background task; then repair partial gangs and write
statuses. Housekeeping runs on timers of its own (`Tasks.every`), never inside a cycle.
Only what can change a decision wakes the loop for a cycle (the cache's change count moved, a
binding ended, a backoff or a timer ran out); what only changes a PodGroup's status (a pod
running, the echo of a status write) is written by a debounced status pass (`report`).
Nothing that reads a stale kind is decided (`ClusterCache.holds`: a watch down, re-listing,
or resumed and not yet current). docs/architecture.md has the why. `liveness` tells
`/healthz` when the loop has stopped deciding.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from gangsched.binder import Binder
from gangsched.cluster import ClusterCache, Key, LiveReader
from gangsched.cluster.cache import Holds
from gangsched.cluster.snapshots import SnapshotKeeper
from gangsched.engine import CycleInput, CycleResult, DeviceCaches, QueueHead, Reservation, decide
from gangsched.engine.queue import Queue, build_queue, order_key
from gangsched.loop.backoff import Backoff
from gangsched.loop.claims import ClaimStep
from gangsched.loop.config import SchedulerConfig
from gangsched.loop.context import LoopContext
from gangsched.loop.gangs import GangFormation, LabelStep
from gangsched.loop.groupclaims import GroupClaims
from gangsched.loop.liveness import Liveness
from gangsched.loop.pipeline import BindingPipeline, GangPlan, PreBindStep
from gangsched.loop.preempt import Preemptions
from gangsched.loop.repair import GangRepair
from gangsched.loop.report import Reporter
from gangsched.loop.tasks import Tasks
from gangsched.metrics import Metrics
from gangsched.model import Pod, PodGroup, QueueingStrategy, Reason
from gangsched.status import Verdict

log = logging.getLogger(__name__)

# Stale reservations and PodGroup claims are looked for at most this often.
_CLAIM_SCAN_SECONDS = 1.0
# Every this many cycles, state about vanished pods and groups is dropped.
_COLLECT_EVERY_CYCLES = 200
# The loop looks at its own liveness at most this often (the probe whenever it is asked).
_STALL_CHECK_SECONDS = 5.0
# Without any wake-up, a cycle runs this often anyway: a safety net, not a schedule (every
# timed retry arms its own wake-up).
_IDLE_CYCLE_SECONDS = 5.0
# A status pass runs this long after the first event that asked for one (a burst is one pass).
_REPORT_AFTER_SECONDS = 0.2
# Wake-ups asked for within this much of one already armed share it.
_WAKE_SLACK_SECONDS = 0.05


class Scheduler:
    def __init__(
        self,
        *,
        cache: ClusterCache,
        binder: Binder,
        live: LiveReader,
        config: SchedulerConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        metrics: Metrics | None = None,
        steps: tuple[PreBindStep, ...] = (),
    ) -> None:
        self.cache = cache
        self.binder = binder
        self.live = live
        self.config = config or SchedulerConfig()
        self.clock = clock
        self.metrics = metrics or Metrics()
        self.tasks = Tasks()
        ctx = LoopContext(
            cache=cache,
            binder=binder,
            live=live,
            config=self.config,
            metrics=self.metrics,
            tasks=self.tasks,
            clock=clock,
            wake=self.wake,
            wake_later=self.wake_later,
        )
        self.backoff = Backoff(config=self.config, wake_later=self.wake_later)
        self.reporter = Reporter(ctx)
        self.claims = ClaimStep(ctx, self.reporter)
        self.group_claims = GroupClaims(ctx, self.reporter, self.claims)
        self.preemptions = Preemptions(ctx, self.reporter)
        self.gangs = GangFormation(ctx, self.reporter, self.backoff)
        self.pipeline = BindingPipeline(
            ctx, self.reporter, steps=(LabelStep(self.gangs), self.claims, *steps)
        )
        self.repair = GangRepair(ctx, self.reporter, self.backoff)
        # Anti-starvation reservations, held across cycles (the engine makes and releases them).
        self.reservations: dict[Key, Reservation] = {}
        # The engine's device table and selector answers, kept across cycles (ours alone).
        self.device_caches = DeviceCaches()
        # The engine's snapshot, brought up to date in what changed (cluster.snapshots).
        self.snapshots = SnapshotKeeper(cache.node_infos, lambda: cache.nodes)
        self.heartbeat = clock()
        self.cycles = 0
        # perf_counter() when `run` started (the caches listed), until the first decision.
        self._started: float | None = None
        self._wake = asyncio.Event()
        self._running = False
        self._wake_at: set[float] = set()  # when the armed wake-ups fire (loop time)
        self._report_armed = False
        # Since when decisions have been held by stale kinds (None: not held), and why.
        self._held: tuple[float, str] | None = None
        # Groups whose pods are being read live (their watch lags behind our writes).
        self._catching_up: set[Key] = set()
        # /healthz fails when placeable work is left undecided past the budget (loop.liveness).
        self.liveness = Liveness(
            budget=self.config.stall_budget_seconds,
            clock=clock,
            binding_limit=self.config.binding_timeout_seconds + self.config.stall_budget_seconds,
        )
        self._stall_checked = clock()

    # ------------------------------------------------------------------ wiring

    def wake(self, group: Key | None = None) -> None:
        """Run a cycle soon (and look at `group`'s status after it)."""
        if group is not None:
            self.reporter.mark(group)
        self._wake.set()

    def wake_later(self, delay: float) -> None:
        """Run a cycle in `delay` seconds (one armed wake-up serves those asked for within
        `_WAKE_SLACK_SECONDS` after it)."""
        loop = asyncio.get_running_loop()
        at = loop.time() + max(delay, 0.05)
        if any(armed <= at <= armed + _WAKE_SLACK_SECONDS for armed in self._wake_at):
            return
        self._wake_at.add(at)

        def fire() -> None:
            self._wake_at.discard(at)
            self._wake.set()

        loop.call_at(at, fire)

    def report(self, group: Key) -> None:
        """`group`'s status may have changed (a member runs, the watch shows our write): look
        at it in a status pass soon, without a cycle (a cycle only for what can change a
        decision). Nothing on a replica that does not schedule."""
        self.reporter.mark(group)
        if not self._running or self._report_armed:
            return
        self._report_armed = True
        asyncio.get_running_loop().call_later(_REPORT_AFTER_SECONDS, self._status_pass)

    def _status_pass(self) -> None:
        self._report_armed = False
        self.tasks.spawn(self.reporter.write_statuses(), name="status pass")

    async def run(self) -> None:
        """Decide until cancelled; an error in one cycle is logged and the loop goes on."""
        self._started = time.perf_counter()
        self._running = True
        tasks = self.tasks
        tasks.every(
            self.config.finished_resync_seconds, self.live.resync_finished, name="resync finished pods"
        )
        tasks.every(_CLAIM_SCAN_SECONDS, self.sweep_claims, name="sweep claim reservations")
        tasks.every(_CLAIM_SCAN_SECONDS, self.sync_group_claims, name="sync PodGroup claims")
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=_IDLE_CYCLE_SECONDS)
            self._wake.clear()
            self.heartbeat = self.clock()
            if self.heartbeat - self._stall_checked >= _STALL_CHECK_SECONDS:
                self._stall_checked = self.heartbeat
                self.liveness.stalled()  # its line, even where nothing probes /healthz
            try:
                await self.cycle()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("scheduling cycle failed; retrying")
                await asyncio.sleep(1.0)

    async def stop(self) -> None:
        await self.tasks.stop()

    async def sweep_claims(self) -> None:
        """Reservations of claims for pods that are gone, and stale allocations (walks every
        claim; not while a kind it reads may be stale: a pod it would think gone may not be)."""
        if self.cache.devices.claims and not self.cache.holds().devices:
            await self.claims.sweep(self.backoff.binding, self._schedule_timeout)

    async def sync_group_claims(self) -> None:
        """PodGroup claims created from templates and cleaned up after their group."""
        holds = self.cache.holds()
        if not (holds.groups or holds.devices):  # it deletes the claims of deleted groups
            await self.group_claims.sync()

    def forget_group(self, key: Key) -> None:
        """The PodGroup was deleted: start afresh if it comes back."""
        self.backoff.forget(key)
        self.reporter.forget(key)
        self.repair.forget(key)
        self.preemptions.forget(key)

    # ------------------------------------------------------------------ one cycle

    async def cycle(self) -> None:
        self.cycles += 1
        self.metrics.cycles.inc()
        now = self.clock()
        self.liveness.cycle_started(now)
        try:
            await self._cycle(now)
        finally:
            self.liveness.cycle_ended()

    async def _cycle(self, now: float) -> None:
        if self.cycles % _COLLECT_EVERY_CYCLES == 0:
            self._collect_garbage()
        holds = self._holds(now)
        if not holds.groups:
            self.liveness.step = "repairing partial gangs"
            await self.repair.check(now)
        self.liveness.step = "building the queue"
        # Automatic gangs (loop.gangs) first: the pods it joins to their gang are members in
        # what the engine is given; those whose gang is still being formed wait, never alone.
        self.gangs.review(self.backoff.binding, holds)
        name = self.config.scheduler_name
        held = self.gangs.hold(self.cache.scheduler_pods(name), now, holds)
        pods = self.cache.queue_pods(name)
        pod_groups = [g for k, g in self.cache.pod_groups.items() if self.config.in_scope(k[0])]
        queue, heads = self._ready_queue(pods, pod_groups, now, held, holds)
        if queue.requests or queue.gated:
            self.liveness.step = "the engine"
            # What the snapshot saw: events applied while the engine runs count as changes after it.
            seen_changes = self.cache.changes
            started = time.perf_counter()
            snapshot = self.snapshots.snapshot()
            cycle = CycleInput.for_operator(
                snapshot=snapshot,
                queue=queue,
                bound=self.cache.bound_pods(),
                pods=pods,
                pod_groups=pod_groups,
                dra=self.cache.devices.objects(now),
                device_caches=self.device_caches,
                reservations=self._live_reservations(),
                nominations=self.preemptions.active(),
                budgets=list(self.cache.budgets.values()),
                reservation_after_seconds=self.config.reservation_after_seconds,
                queueing=self.config.queueing,
                heads=heads,
                preemption=not holds.preemption,
            )
            result = await asyncio.to_thread(decide, cycle)
            self.metrics.engine_seconds.observe(time.perf_counter() - started)
            if self._started is not None and result.decisions:
                log.info(
                    "first decision %.2f s after the caches were listed (%d groups, engine %.2f s)",
                    time.perf_counter() - self._started,
                    len(result.decisions),
                    time.perf_counter() - started,
                )
                self._started = None
            self.reservations = {r.owner: r for r in result.reservations}
            self._apply(result, now, seen_changes)
            self.preemptions.review(result.decisions)
        self.liveness.step = "status writes"
        await self.reporter.write_statuses()

    def _schedule_timeout(self, group: Key) -> float:
        pod_group = self.cache.pod_groups.get(group)
        if pod_group is not None and pod_group.spec is not None and pod_group.spec.schedule_timeout_seconds:
            return float(pod_group.spec.schedule_timeout_seconds)
        return self.config.default_schedule_timeout_seconds

    def _live_reservations(self) -> list[Reservation]:
        """Reservations whose owner still waits: a deleted group (or pod) releases its own."""
        cache = self.cache
        alive = []
        for owner, reservation in self.reservations.items():
            if owner in cache.pod_groups:
                waiting = any(not p.node_name and not p.terminal for p in cache.members(owner, assumed=True))
            else:
                pod = cache.pods.get(owner)
                waiting = pod is not None and not pod.node_name and not cache.is_assumed(owner)
            if waiting:
                alive.append(reservation)
        return alive

    def _holds(self, now: float) -> Holds:
        """What stale kinds keep from being decided now; the liveness guard and the log are
        told when a hold begins and ends, and a hold that outlasts the stall budget fails
        /healthz with the kinds that hold it."""
        holds = self.cache.holds()
        if holds:
            why = holds.why()
            if self._held is None:
                log.warning("holding the decisions that read a stale view: %s", why)
                self._held = (now, why)
            else:
                self._held = (self._held[0], why)
            self.liveness.held(self._held[0], why)
            self.wake_later(0.1)  # and the intake wakes the loop when a kind is current again
        elif self._held is not None:
            log.info("every kind is current again: deciding (held %.1f s)", now - self._held[0])
            self._held = None
            self.liveness.held(None, "")
        return holds

    def _ready_queue(
        self, pods: list[Pod], pod_groups: list[PodGroup], now: float, held: dict[Key, str], holds: Holds
    ) -> tuple[Queue, list[QueueHead]]:
        """This cycle's queue, built once from what the engine is given, with only the groups
        that may be decided now (none that reads a stale kind: `holds`); and, for StrictFIFO,
        the heads among those left out (the groups behind them still wait for them)."""
        replacing = set(self.gangs.replacing)
        queue = build_queue(
            pods,
            pod_groups,
            scheduler_name=self.config.scheduler_name,
            waiting_seconds=self.backoff.waiting_seconds(now),
            held=held,
        )
        in_scope = [key for key, _ in queue.entries() if self.config.in_scope(key[0])]
        self.liveness.waiting((key for key in in_scope if not self.backoff.binding(key)), now)
        ready: set[tuple[Key, bool]] = set()
        if not holds.everything:
            # A kind stale since its watch ended: what it held may be gone (a node, a PodGroup,
            # a device deleted while the watch was down), so nothing that reads it is decided.
            with_devices = {r.key for r in queue.requests if r.uses_devices} if holds.devices else set()
            # A member that left the watch may be gone: its group waits for the live read.
            leaving = self.live.leaving_groups()
            for key, is_group in queue.entries():
                if (is_group and (holds.groups or key in replacing or key in leaving)) or key in with_devices:
                    continue
                if self.config.in_scope(key[0]) and self._may_decide(key, is_group, now):
                    ready.add((key, is_group))
        heads = []
        if self.config.queueing == QueueingStrategy.STRICT_FIFO:
            heads = [
                QueueHead(r.key, order_key(r))
                for r in queue.requests
                if (r.key, r.is_pod_group) not in ready and self.backoff.blocking(r.key)
            ]
        return queue.only(lambda key, is_group: (key, is_group) in ready), heads

    def _may_decide(self, key: Key, is_group: bool, now: float) -> bool:
        if self.backoff.binding(key):
            return False
        if is_group and not self._caught_up(key, now):
            return False
        if key not in self.reservations and self.backoff.starving(key, now):
            return True  # decided now, whatever its backoff: so it gets its reservation now
        return self.backoff.due(key, now, self.cache.changes)

    def _caught_up(self, key: Key, now: float) -> bool:
        """Never decide a group on a cache that has not seen our own writes for it (KEP-5647)."""
        state = self.backoff.state(key)
        caught = self.cache.caught_up(key)
        if caught is not True:
            if state.behind_since is None:
                state.behind_since = now
            late = caught is None or now - state.behind_since > self.config.consistency_timeout_seconds
            if late and key not in self._catching_up:
                # Read the pods live, in the background: the other groups are decided meanwhile.
                self._catching_up.add(key)
                self.tasks.spawn(self._catch_up(key), name=f"catch up {key[0]}/{key[1]}")
            self.wake_later(0.2)
            return False
        state.behind_since = None
        return True

    async def _catch_up(self, key: Key) -> None:
        try:
            await self.live.catch_up(key)
        finally:
            self._catching_up.discard(key)
            self.wake(key)

    # ------------------------------------------------------------------ decisions

    def _apply(self, result: CycleResult, now: float, seen_changes: int) -> None:
        unplaced: list[Reason] = []
        for decision in result.decisions:
            self.metrics.decisions.labels(reason=decision.reason.value).inc()
            key = decision.key
            self.liveness.decided(key, binding=decision.scheduled)
            if decision.scheduled:
                self.backoff.scheduled(key)
                self.reporter.set_verdict(
                    key,
                    Verdict(
                        reason=Reason.SCHEDULED,
                        message=decision.message,
                        binding=True,
                        domain=decision.domain,
                    ),
                )
                plan = self.pipeline.start(decision)
                self.tasks.spawn(self._bind(plan), name=f"bind {key[0]}/{key[1]}")
                continue
            unplaced.append(decision.reason)
            preempting = decision.preemption is not None or key in self.preemptions.nominations
            self.backoff.failed(
                key,
                decision.reason,
                now,
                seen_changes,
                preempting=preempting,
                blocking=decision.blocks_queue,
            )
            self.reporter.waiting(decision)
            if decision.preemption is not None and key not in self.preemptions.nominations:
                self.preemptions.nominate(decision)
                self.tasks.spawn(self.preemptions.evict(decision), name=f"preempt for {key[0]}/{key[1]}")
        self.metrics.cycle_done(unplaced)
        log.debug("cycle %d: %d decisions", self.cycles, len(result.decisions))

    async def _bind(self, plan: GangPlan) -> None:
        try:
            await self.pipeline.run(plan)
        finally:
            self.backoff.bound(plan.key)
            self.liveness.bound(plan.key)
            self.reporter.binding_done(plan.key)
            self.wake()

    def _collect_garbage(self) -> None:
        """Drop what we remember about pods and groups that no longer exist."""
        cache = self.cache

        def exists(key: Key) -> bool:
            return key in cache.pod_groups or key in cache.pods

        self.backoff.collect(exists)
        self.reporter.collect(exists, lambda key: key in cache.pods)
        self.gangs.collect(lambda key: key in cache.pods)
