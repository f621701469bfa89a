"""trainer.kubeflow.org/v1alpha1 TrainJob (kubeflow/trainer, the JobSet runtime plugin): pod ->
Job -> JobSet -> TrainJob. A TrainJob runs as the one JobSet it controls: its gang is the
JobSet's, counted once that JobSet is known.
"""

from __future__ import annotations

from gangsched.model.owners.jobset import JOBSET
from gangsched.model.owners.rule import Owner, OwnerLookup, OwnerNotKnownError, OwnerRule


class TrainJobRule(OwnerRule):
    def min_count(self, owner: Owner, lookup: OwnerLookup) -> int | None:
        jobsets = [o for o in lookup.controlled_by(owner.uid) if o.rule is JOBSET]
        if not jobsets:
            raise OwnerNotKnownError(f"the JobSet of {owner.describe()} is not known yet")
        return JOBSET.min_count(jobsets[0], lookup)


TRAINJOB = TrainJobRule("trainer.kubeflow.org/v1alpha1", "TrainJob", "trainjobs")
