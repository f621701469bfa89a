"""End-to-end benchmark: gangsched against kube-scheduler v1.36's native gang scheduling.

One real control plane (gangsched_testing.devcluster), N fake 8-GPU nodes in zones, blocks
and racks, and a seeded workload of gangs whose sizes follow the shape of public ML-cluster
traces. Each contestant gets the same nodes, empty, one after the other, and is fed the same
workload: gangsched through its PodGroup CRD, kube-scheduler through native
``scheduling.k8s.io/v1alpha2`` PodGroups. A watch on pods records every binding.
``--workload preemption`` is a mixed-priority variant: low-priority gangs fill the cluster,
then high-priority gangs arrive that only run by preempting (kube-scheduler with
``WorkloadAwarePreemption``); its figures are ``metrics.compute_preemption``.
``--workload jobs`` runs gangsched alone on the same gangs as PodGroups, as Indexed
batch/v1 Jobs made into automatic gangs (the real Job controller creates the pods), and as
Jobs labelled into PodGroups; its table is ``report.jobs_table``.

Modules: ``workload`` (pure: cluster shape, gangs, manifests), ``metrics`` (pure: figures
from the recorded timeline), ``harness`` (processes, load, observer), ``kwok`` (KWOK as the
nodes' kubelet, ``--kubelet kwok``), ``report`` (markdown and the PNG; matplotlib is imported
only there), ``foreign`` (bound pods of another scheduler, ``--foreign-pods``, issue 27;
bench/startup.py uses them too), ``__main__`` (the command line).

Run: ``python -m bench.e2e --nodes 1000`` from the repository root, or ``make bench-e2e``.
The control plane and fake nodes come from the test tooling's source root, testing/, which
is not installed: importing this package puts it on ``sys.path``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "testing"))  # gangsched_testing
