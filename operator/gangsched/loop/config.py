"""The loop's settings, and fault injection for tests (an option of the run, never read deep down)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gangsched.engine import DEFAULT_RESERVATION_AFTER_SECONDS
from gangsched.model import DEFAULT_SCHEDULER_NAME, QueueingStrategy


@dataclass(slots=True, frozen=True)
class Faults:
    """Deliberate slowness, for tests that must act in the middle of something. Off by default."""

    # Each Binding waits this long before it is sent: a gang stays half bound long enough for a
    # test to delete a pod or kill the operator.
    bind_delay_seconds: float = 0.0
    # Events of bound pods reach the cache this late, as from a lagging watch.
    watch_delay_seconds: float = 0.0


@dataclass(slots=True)
class SchedulerConfig:
    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    # None: every namespace. Capacity always counts pods of every namespace.
    namespaces: frozenset[str] | None = None
    backoff_initial_seconds: float = 0.5
    # As kube-scheduler's podMaxBackoffSeconds: a cluster change is noticed within this.
    backoff_max_seconds: float = 10.0
    # An unschedulable group is retried at least this often even if nothing changed.
    resync_seconds: float = 60.0
    # Rollback of a partial gang when the PodGroup sets no scheduleTimeoutSeconds.
    default_schedule_timeout_seconds: float = 300.0
    # After this long behind our own writes, stop waiting for the watch and read live.
    consistency_timeout_seconds: float = 5.0
    reservation_after_seconds: float = DEFAULT_RESERVATION_AFTER_SECONDS
    # StrictFIFO: a group that does not fit blocks the groups behind it (`engine.cycle`).
    queueing: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    # Finished members of our groups are re-listed this often (the watch skips finished pods).
    finished_resync_seconds: float = 120.0
    # Post a "Scheduled" Event on every bound pod, as kube-scheduler does.
    pod_events: bool = True
    # KEP-5007: how long a gang waits for its devices' binding conditions (upstream's
    # DynamicResourcesBindingTimeoutDefault), and how long devices whose conditions failed
    # are not handed out again, so the gang is placed elsewhere.
    binding_timeout_seconds: float = 600.0
    failed_device_hold_seconds: float = 300.0
    # Liveness (loop.liveness): a group with pending pods the loop has not decided for this
    # long, a cycle running this long, or a gang being bound this long past
    # binding_timeout_seconds means the loop is stuck, and /healthz fails so the replica is
    # restarted instead of idling. 0: off. Must exceed resync_seconds + backoff_max_seconds,
    # the longest a waiting group goes undecided in a healthy loop.
    stall_budget_seconds: float = 120.0
    faults: Faults = field(default_factory=Faults)

    def in_scope(self, namespace: str) -> bool:
        return self.namespaces is None or namespace in self.namespaces
