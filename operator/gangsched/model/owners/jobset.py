"""jobset.x-k8s.io/v1alpha2 JobSet (kubernetes-sigs/jobset, jobset_controller.go constructJob):
pod -> Job -> JobSet. Each replicatedJob runs `replicas` Jobs of its template; a Job runs
min(parallelism, completions) pods at once (a work queue: parallelism).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gangsched.model.common import list_field, object_field
from gangsched.model.owners.job import JobCounts, job_counts
from gangsched.model.owners.rule import Owner, OwnerLookup, OwnerRule, required_int


@dataclass(frozen=True, slots=True)
class ReplicatedJob:
    """One JobSet spec.replicatedJobs[] entry: replicas (default 1) of a Job template."""

    name: str
    replicas: int
    job: JobCounts


@dataclass(frozen=True, slots=True)
class JobSetCounts:
    replicated_jobs: tuple[ReplicatedJob, ...]


class JobSetRule(OwnerRule):
    def counts(self, spec: Mapping[str, Any]) -> JobSetCounts:
        jobs = []
        for i, item in enumerate(list_field(spec.get("replicatedJobs"), "spec.replicatedJobs")):
            where = f"spec.replicatedJobs[{i}]"
            item = object_field(item, where)
            template = object_field(
                object_field(item.get("template"), f"{where}.template").get("spec"), f"{where}.template.spec"
            )
            jobs.append(
                ReplicatedJob(
                    name=str(item.get("name") or ""),
                    replicas=required_int(item.get("replicas"), f"{where}.replicas", default=1),
                    job=job_counts(template, f"{where}.template.spec"),
                )
            )
        return JobSetCounts(tuple(jobs))

    def min_count(self, owner: Owner, lookup: OwnerLookup) -> int | None:
        counts: JobSetCounts = owner.counts
        count = sum(rjob.replicas * rjob.job.running for rjob in counts.replicated_jobs)
        return count if count >= 1 else None


JOBSET = JobSetRule("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets")
