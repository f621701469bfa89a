"""batch/v1 Job (kubernetes pkg/controller/job): pod -> Job.

KEP-5547 (Kubernetes v1.36, the Job controller's own PodGroup): an Indexed Job whose
parallelism equals its completions, at least 2, is a gang of parallelism pods; any other Job
(a work queue, a single pod) is no gang unless annotated min-count.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gangsched.model.common import ModelError
from gangsched.model.owners.rule import Owner, OwnerLookup, OwnerRule, optional_int


@dataclass(frozen=True, slots=True)
class JobCounts:
    """batch/v1 JobSpec, as the apiserver defaults it (SetDefaults_Job): both parallelism and
    completions unset -> 1 and 1; parallelism unset -> 1; completions stays unset (a work
    queue) when only parallelism is given."""

    parallelism: int
    completions: int | None
    indexed: bool

    @property
    def running(self) -> int:
        """Pods it runs at once: min(parallelism, completions), parallelism for a work queue."""
        return self.parallelism if self.completions is None else min(self.parallelism, self.completions)


def job_counts(spec: Mapping[str, Any], where: str) -> JobCounts:
    """A JobSpec's counts (a Job's own, or a JobSet's template's), fields named from `where`."""
    parallelism = optional_int(spec.get("parallelism"), f"{where}.parallelism")
    completions = optional_int(spec.get("completions"), f"{where}.completions")
    if parallelism is None and completions is None:
        parallelism, completions = 1, 1  # SetDefaults_Job
    mode = spec.get("completionMode")
    if mode is not None and mode not in ("NonIndexed", "Indexed"):
        raise ModelError(f"{where}.completionMode: unknown value {mode!r}, must be 'NonIndexed' or 'Indexed'")
    return JobCounts(parallelism if parallelism is not None else 1, completions, mode == "Indexed")


class JobRule(OwnerRule):
    def counts(self, spec: Mapping[str, Any]) -> JobCounts:
        return job_counts(spec, "spec")

    def min_count(self, owner: Owner, lookup: OwnerLookup) -> int | None:
        job: JobCounts = owner.counts
        if job.indexed and job.completions is not None and job.parallelism == job.completions >= 2:
            return job.parallelism
        return None


JOB = JobRule("batch/v1", "Job", "jobs")
