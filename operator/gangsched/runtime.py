"""Assemble and run the operator: API client, cache, binder, scheduler, kopf.

kopf runs cluster-wide whatever `--namespace` says: capacity accounting needs every bound
pod on every node. The namespace option limits which PodGroups and pods are scheduled.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import kopf
from kopf._core.engines.peering import Identity  # kopf exports no public name for it
from kubernetes import client, config

from gangsched._rawapi import list_items
from gangsched.binder import Binder
from gangsched.cluster import ClusterCache
from gangsched.handlers import build_registry
from gangsched.leader import LeaderElector, LeaseConfig, default_identity
from gangsched.model import GROUP, LIVE_PODS_SELECTOR, PLURAL, VERSION
from gangsched.scheduler import Scheduler, SchedulerConfig

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RunOptions:
    scheduler: SchedulerConfig
    kubeconfig: str | None = None
    liveness_port: int | None = 8080
    metrics_port: int | None = None
    concurrency: int = 32
    log_format: str = "human"
    verbose: bool = False
    lease: LeaseConfig | None = None


def api_client(*, kubeconfig: str | None, pool: int) -> client.ApiClient:
    """In-cluster (service-account token) when running in a pod, else the kubeconfig."""
    configuration = client.Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, client_configuration=configuration
        )
    configuration.connection_pool_maxsize = pool
    return client.ApiClient(configuration)


async def prime(cache: ClusterCache, api: client.ApiClient, binder: Binder, *, scheduler_name: str) -> None:
    """Fill the cache from consistent LISTs, so the first decision sees every bound pod."""
    lists: list[tuple[Callable[[str | None, Any], Any], str, dict[str, str | int | bool]]] = [
        (cache.apply_priority_class, "/apis/scheduling.k8s.io/v1/priorityclasses", {}),
        (cache.apply_node, "/api/v1/nodes", {}),
        (cache.apply_pod, "/api/v1/pods", {"fieldSelector": LIVE_PODS_SELECTOR}),
        (cache.apply_pod_group, f"/apis/{GROUP}/{VERSION}/{PLURAL}", {}),
    ]
    for apply, path, query in lists:
        for item in await asyncio.to_thread(list_items, api, path, query=query):
            apply("LISTED", item)
    for item in await binder.finished_members(scheduler_name):
        cache.apply_pod("LISTED", item)
    log.info(
        "cache primed: %d nodes, %d pods, %d PodGroups",
        len(cache.nodes),
        len(cache.pods),
        len(cache.pod_groups),
    )


def run(options: RunOptions) -> None:
    kopf.configure(
        verbose=options.verbose,
        log_format=kopf.LogFormat.JSON if options.log_format == "json" else kopf.LogFormat.FULL,
    )
    logging.getLogger("aiohttp.access").propagate = False
    if not options.verbose:
        # kopf logs every handled watch event at INFO: thousands of lines for nothing.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    api = api_client(kubeconfig=options.kubeconfig, pool=options.concurrency + 4)
    cache = ClusterCache()
    binder = Binder(
        api=api,
        concurrency=options.concurrency,
        bind_delay_seconds=float(os.environ.get("GANGSCHED_FAULT_BIND_DELAY_SECONDS", "0")),
        instance=options.lease.identity if options.lease else default_identity(),
    )
    scheduler = Scheduler(cache=cache, binder=binder, config=options.scheduler)

    async def do_prime() -> None:
        await prime(cache, api, binder, scheduler_name=options.scheduler.scheduler_name)

    registry = build_registry(
        cache=cache,
        scheduler=scheduler,
        prime=do_prime,
        elector=LeaderElector(api=api, config=options.lease) if options.lease else None,
        bound_event_delay_seconds=float(os.environ.get("GANGSCHED_FAULT_WATCH_DELAY_SECONDS", "0")),
        metrics_port=options.metrics_port,
    )

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # The same identity as our own client, whether from a kubeconfig or in-cluster.
        configuration = api.configuration
        if configuration.refresh_api_key_hook is not None:  # in-cluster tokens rotate
            configuration.refresh_api_key_hook(configuration)
        token = configuration.api_key.get("BearerToken") or configuration.api_key.get("authorization")
        if token and token.lower().startswith("bearer "):
            token = token[7:]
        return kopf.ConnectionInfo(
            server=configuration.host,
            ca_path=configuration.ssl_ca_cert,
            insecure=not configuration.verify_ssl,
            token=token or None,
            certificate_path=configuration.cert_file,
            private_key_path=configuration.key_file,
            default_namespace=None,
        )

    liveness = f"http://0.0.0.0:{options.liveness_port}/healthz" if options.liveness_port else None
    try:
        kopf.run(
            registry=registry,
            clusterwide=True,
            standalone=True,
            liveness_endpoint=liveness,
            # kopf would otherwise look its identity up in /etc/passwd (absent for arbitrary uids).
            identity=Identity(binder.instance),
        )
    finally:
        binder.close()
