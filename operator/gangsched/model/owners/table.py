"""The table of owner rules, keyed by API group and kind: which workloads make automatic gangs.

Adding a workload kind is one module with its rule (`owners.rule.OwnerRule`) and one entry
here; the operator then watches it where served (`cluster.kinds` makes a row of each), reads
its objects, and the chain walk, the annotations and the formation policy need nothing new.
"""

from __future__ import annotations

from collections.abc import Mapping

from gangsched.model.owners.job import JOB
from gangsched.model.owners.jobset import JOBSET
from gangsched.model.owners.kubeflow import PADDLEJOB, PYTORCHJOB, TFJOB, XGBOOSTJOB
from gangsched.model.owners.leaderworkerset import LEADERWORKERSET
from gangsched.model.owners.mpijob import MPIJOB
from gangsched.model.owners.raycluster import RAYCLUSTER
from gangsched.model.owners.rule import OwnerRule
from gangsched.model.owners.trainjob import TRAINJOB

OWNER_RULES: tuple[OwnerRule, ...] = (
    JOB,
    JOBSET,
    PYTORCHJOB,
    TFJOB,
    XGBOOSTJOB,
    PADDLEJOB,
    MPIJOB,
    TRAINJOB,
    LEADERWORKERSET,
    RAYCLUSTER,
)
_BY_TYPE: Mapping[tuple[str, str], OwnerRule] = {(rule.api_version, rule.kind): rule for rule in OWNER_RULES}


def rule_for(api_version: str, kind: str) -> OwnerRule | None:
    """The rule of objects of this apiVersion and kind, None for any other."""
    return _BY_TYPE.get((api_version, kind))
