"""Test and demo tooling for gangsched: never shipped, never imported by the product.

Like kube-scheduler's ``pkg/scheduler/testing``, this lives beside the product rather than
inside it: ``testing/`` is a source root of its own, which the wheel does not package
(pyproject.toml packages only ``operator/gangsched``), so nothing here can become a
dependency of the scheduler a cluster runs.

- :mod:`gangsched_testing.devcluster`: a throwaway control plane (etcd + kube-apiserver)
  for the integration tests, the demo, the benchmarks and ``make dev-cluster``;
- :mod:`gangsched_testing.fakenodes`: fake nodes and a kubelet stand-in for it;
- :mod:`gangsched_testing.builders`: Node, Pod and PodGroup manifests (plain dicts) and
  their parsed forms, the one set of object builders for tests and benchmarks;
- :mod:`gangsched_testing.crd_cases`: the PodGroup specs the CRD must accept or reject,
  checked offline (tests/unit/test_crd.py) and by a real apiserver
  (tests/integration/test_podgroup_crd.py).

Who finds it how: pytest through ``pythonpath`` in pyproject.toml; bench/ and hack/demo.py,
which people run directly, put ``testing/`` on ``sys.path`` themselves; ``make dev-cluster``
(a ``python -m``) sets ``PYTHONPATH``. It needs the ``test`` (or ``dev``, ``bench``) extra:
``cryptography``, for the control plane's PKI.
"""
