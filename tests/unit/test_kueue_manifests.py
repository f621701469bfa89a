"""gangsched_testing.kueue's manifests, on a miniature of the layout hack/build-kueue.sh installs
(Kueue's config/components), so `make test` checks the rewriting without building Kueue."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gangsched_testing import kueue as kq

URL = "https://127.0.0.1:9443"
CA = "Q0E="


def _crd(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{name}.kueue.x-k8s.io"},
        "spec": {"group": "kueue.x-k8s.io", "names": {"plural": name}},
    }


def _service_webhook(name: str, path: str, group: str, resource: str) -> dict[str, Any]:
    return {
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"service": {"name": "webhook-service", "namespace": "system", "path": path}},
        "failurePolicy": "Fail",
        "name": name,
        "rules": [
            {"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": [resource]}
        ],
        "sideEffects": "None",
    }


@pytest.fixture
def installation(tmp_path: Path) -> kq.Installation:
    crd = tmp_path / "config" / "components" / "crd"
    (crd / "bases").mkdir(parents=True)
    (crd / "patches").mkdir()
    for name in ("workloads", "resourceflavors"):
        (crd / "bases" / f"kueue.x-k8s.io_{name}.yaml").write_text(yaml.safe_dump(_crd(name)))
    (crd / "patches" / "webhook_in_workloads.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": "workloads.kueue.x-k8s.io"},
                "spec": {
                    "conversion": {
                        "strategy": "Webhook",
                        "webhook": {
                            "clientConfig": {
                                "service": {
                                    "namespace": "system",
                                    "name": "webhook-service",
                                    "path": "/convert",
                                }
                            },
                            "conversionReviewVersions": ["v1"],
                        },
                    }
                },
            }
        )
    )
    (crd / "kustomization.yaml").write_text(
        "resources:\n"
        "- bases/kueue.x-k8s.io_workloads.yaml\n"
        "- bases/kueue.x-k8s.io_resourceflavors.yaml\n"
        "patches:\n"
        "- path: patches/webhook_in_workloads.yaml\n"
        "#- path: patches/webhook_in_resourceflavors.yaml\n"
    )
    webhook = tmp_path / "config" / "components" / "webhook"
    webhook.mkdir(parents=True)
    documents = [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "mutating-webhook-configuration"},
            "webhooks": [
                _service_webhook("mjob.kb.io", "/mutate-batch-v1-job", "batch", "jobs"),
                _service_webhook("mpod.kb.io", "/mutate--v1-pod", "", "pods"),
                _service_webhook(
                    "mworkload.kb.io",
                    "/mutate-kueue-x-k8s-io-v1beta2-workload",
                    "kueue.x-k8s.io",
                    "workloads",
                ),
            ],
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "validating-webhook-configuration"},
            "webhooks": [
                _service_webhook("vjobset.kb.io", "/validate-jobset", "jobset.x-k8s.io", "jobsets"),
                _service_webhook("vjob.kb.io", "/validate-batch-v1-job", "batch", "jobs"),
            ],
        },
    ]
    (webhook / "manifests.yaml").write_text("---\n" + yaml.safe_dump_all(documents))
    # As Kueue's: inline patches keyed by webhook name (v0.17 keeps pod webhooks out of kube-system).
    (webhook / "kustomization.yaml").write_text(
        "resources:\n- manifests.yaml\n- service.yaml\n"
        "patches:\n"
        "- patch: |-\n"
        "    apiVersion: admissionregistration.k8s.io/v1\n"
        "    kind: MutatingWebhookConfiguration\n"
        "    metadata:\n"
        "      name: mutating-webhook-configuration\n"
        "    webhooks:\n"
        "    - name: mpod.kb.io\n"
        "      namespaceSelector:\n"
        "        matchExpressions:\n"
        "        - key: kubernetes.io/metadata.name\n"
        "          operator: NotIn\n"
        "          values: [kube-system, kueue-system]\n"
    )
    return kq.Installation(home=tmp_path)


def test_every_webhook_patched_as_kueues_kustomization_does_each_called_at_its_url(
    installation: kq.Installation,
) -> None:
    mutating, validating = kq.webhook_configurations(installation, url=URL, ca_bundle=CA)
    assert mutating["metadata"]["name"] == kq.MUTATING_WEBHOOKS
    assert validating["metadata"]["name"] == kq.VALIDATING_WEBHOOKS
    # All of them: Kueue answers those of integrations it does not run with a no-op.
    assert [w["name"] for w in mutating["webhooks"]] == ["mjob.kb.io", "mpod.kb.io", "mworkload.kb.io"]
    assert [w["name"] for w in validating["webhooks"]] == ["vjobset.kb.io", "vjob.kb.io"]
    job, pod, _ = mutating["webhooks"]
    assert job["clientConfig"] == {"url": f"{URL}/mutate-batch-v1-job", "caBundle": CA}
    assert job["failurePolicy"] == "Fail"
    assert job["rules"][0]["resources"] == ["jobs"]
    assert "namespaceSelector" not in job
    assert pod["clientConfig"] == {"url": f"{URL}/mutate--v1-pod", "caBundle": CA}
    assert pod["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "kueue-system"]
    assert pod["rules"][0]["resources"] == ["pods"]  # the patch adds, it does not replace


def test_crds_get_the_conversion_webhooks_kustomize_patches_in_at_our_url(
    installation: kq.Installation,
) -> None:
    crds = {c["metadata"]["name"]: c for c in kq.crd_manifests(installation, url=URL, ca_bundle=CA)}
    assert set(crds) == {"workloads.kueue.x-k8s.io", "resourceflavors.kueue.x-k8s.io"}
    assert crds["workloads.kueue.x-k8s.io"]["spec"]["conversion"] == {
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": {"url": f"{URL}/convert", "caBundle": CA},
            "conversionReviewVersions": ["v1"],
        },
    }
    assert "conversion" not in crds["resourceflavors.kueue.x-k8s.io"]["spec"]  # its patch is commented out


def test_configuration_serves_on_loopback_without_kueues_certificates_tas_or_leader_election(
    tmp_path: Path,
) -> None:
    config = kq.configuration(
        webhook_port=9443, cert_dir=tmp_path, health_port=8081, metrics_port=8443, integrations=["batch/job"]
    )
    assert config["webhook"] == {"host": "127.0.0.1", "port": 9443, "certDir": str(tmp_path)}
    assert config["internalCertManagement"] == {"enable": False}
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["featureGates"]["TopologyAwareScheduling"] is False
    assert config["integrations"] == {"frameworks": ["batch/job"]}
    assert config["health"]["healthProbeBindAddress"].startswith("127.0.0.1:")
    assert config["metrics"]["bindAddress"].startswith("127.0.0.1:")


def test_missing_build_says_how_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(kq.KueueNotFoundError, match="make kueue"):
        kq.find_kueue(environ={"GANGSCHED_KUEUE_HOME": str(tmp_path)})
