"""Typed views of what gangsched reads: PodGroups (both APIs), Pods, Nodes, PriorityClasses.

Parsing and validation happen here, at the boundary (pydantic for the PodGroup spec, whose
errors users must see verbatim); everything inside the engine works on the plain slotted
dataclasses these modules produce. One module per kind; this package face re-exports them.
"""

from gangsched.model.common import (
    BOUND_FOR_ANNOTATION,
    DEFAULT_SCHEDULER_NAME,
    GROUP,
    LIVE_PODS_SELECTOR,
    MAX_TOPOLOGY_LEVELS,
    NATIVE_GROUP,
    NATIVE_PLURAL,
    NATIVE_VERSION,
    PLURAL,
    POD_GROUP_LABEL,
    PODS,
    TERMINAL_PHASES,
    VERSION,
    Key,
    ModelError,
    PodGroupApi,
)
from gangsched.model.node import Node, Taint, parse_node
from gangsched.model.pod import (
    Placement,
    Pod,
    PodShape,
    SelectorRequirement,
    SelectorTerm,
    Toleration,
    parse_pod,
    pod_requests,
)
from gangsched.model.podgroup import (
    PodGroup,
    PodGroupSpec,
    TopologyConstraint,
    TopologyMode,
    parse_native_pod_group,
    parse_native_pod_group_spec,
    parse_pod_group,
    parse_pod_group_spec,
)
from gangsched.model.priority import PriorityClass, PriorityClasses, parse_priority_class
from gangsched.model.reasons import EventReason, Phase, Reason

__all__ = [
    "BOUND_FOR_ANNOTATION",
    "DEFAULT_SCHEDULER_NAME",
    "GROUP",
    "LIVE_PODS_SELECTOR",
    "MAX_TOPOLOGY_LEVELS",
    "NATIVE_GROUP",
    "NATIVE_PLURAL",
    "NATIVE_VERSION",
    "PLURAL",
    "PODS",
    "POD_GROUP_LABEL",
    "TERMINAL_PHASES",
    "VERSION",
    "EventReason",
    "Key",
    "ModelError",
    "Node",
    "Phase",
    "Placement",
    "Pod",
    "PodGroup",
    "PodGroupApi",
    "PodGroupSpec",
    "PodShape",
    "PriorityClass",
    "PriorityClasses",
    "Reason",
    "SelectorRequirement",
    "SelectorTerm",
    "Taint",
    "Toleration",
    "TopologyConstraint",
    "TopologyMode",
    "parse_native_pod_group",
    "parse_native_pod_group_spec",
    "parse_node",
    "parse_pod",
    "parse_pod_group",
    "parse_pod_group_spec",
    "parse_priority_class",
    "pod_requests",
]
