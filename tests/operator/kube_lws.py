"""The LeaderWorkerSet controller and cluster DNS, as the fake API plays them (``FakeKube.run_controllers``).

From kubernetes-sigs/lws v0.10:
- ``pkg/controllers/leaderworkerset_controller.go`` ``reconcileHeadlessServices``: with
  ``networkConfig.subdomainPolicy: Shared`` (the webhook's default) the controller creates one headless
  Service named after the LeaderWorkerSet, through ``pkg/utils/controller/controller_utils.go``
  ``CreateHeadlessServiceIfNotExists``, which GETs the name and silently does nothing when any Service
  of that name exists, whoever made it;
- ``pkg/controllers/pod_controller.go``: with ``UniquePerReplica`` the pod controller creates one headless
  Service per group instead, named after the group's leader pod (``NAME-GROUP``), selecting the
  group's pods (set-name and group-index labels); ``pkg/webhooks/pod_webhook.go`` then sets the
  leader pod's ``spec.subdomain`` to its own name;
- ``pkg/utils/pod/pod_utils.go`` ``AddLWSVariables``: ``LWS_LEADER_ADDRESS`` is
  ``NAME-GROUP.SUBDOMAIN.NAMESPACE``, SUBDOMAIN being the StatefulSet's serviceName (the
  LeaderWorkerSet's name) unless the webhook set it per group;
- ``status.observedGeneration`` exists from v0.9 on (``api/leaderworkerset/v1/leaderworkerset_types.go``).
From the cluster DNS specification (kubernetes/dns ``docs/specification.md``, 2.4.1): a pod's
``HOSTNAME.SUBDOMAIN.NAMESPACE.svc`` has an A record only when a headless Service (clusterIP None)
named SUBDOMAIN in its namespace selects the pod.

A group whose workers cannot resolve the leader's address never forms: torch.distributed's rendezvous
fails, the workers exit, and RecreateGroupOnPodRestart restarts the whole group, over and over
(CrashLoopBackOff). The fake's groups are pods the scheduler places like any other.
"""

from __future__ import annotations

import copy
from typing import Any

Obj = dict[str, Any]
SET_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
SHARED, UNIQUE_PER_REPLICA = "Shared", "UniquePerReplica"
CURRENT_VERSION, OBSERVED_GENERATION_SINCE = (0, 10), (0, 9)


def subdomain_policy(lws: Obj) -> str:
    return ((lws["spec"].get("networkConfig") or {}).get("subdomainPolicy")) or SHARED


def headless_services(lws: Obj) -> list[Obj]:
    """The headless Services the LWS controllers want for ``lws``, each created only if its name is free."""
    meta = lws["metadata"]
    owner = {"apiVersion": lws["apiVersion"], "kind": "LeaderWorkerSet", "name": meta["name"], "uid": meta["uid"],
             "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    if subdomain_policy(lws) == SHARED:
        wanted = [(meta["name"], {SET_NAME_LABEL: meta["name"]})]
    else:
        wanted = [(f"{meta['name']}-{g}", {SET_NAME_LABEL: meta["name"], GROUP_INDEX_LABEL: str(g)})
                  for g in range(lws["spec"].get("replicas", 1))]  # fmt: skip
    return [
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": name, "namespace": meta["namespace"], "labels": {SET_NAME_LABEL: meta["name"]},
                      "ownerReferences": [owner]},
         "spec": {"clusterIP": "None", "selector": selector, "publishNotReadyAddresses": True}}
        for name, selector in wanted
    ]  # fmt: skip


def leader_subdomain(lws: Obj, group: int) -> str:
    return f"{lws['metadata']['name']}-{group}" if subdomain_policy(lws) == UNIQUE_PER_REPLICA else lws["metadata"]["name"]


def leader_address(lws: Obj, group: int) -> str:
    meta = lws["metadata"]
    return f"{meta['name']}-{group}.{leader_subdomain(lws, group)}.{meta['namespace']}"


def resolves(services: dict[str, Obj], pod_labels: dict[str, str], subdomain: str) -> bool:
    """Cluster DNS: a pod's name under SUBDOMAIN resolves only through a headless Service of that name selecting it."""
    service = services.get(subdomain)
    if service is None or service["spec"].get("clusterIP") != "None":
        return False
    return all(pod_labels.get(k) == v for k, v in (service["spec"].get("selector") or {}).items())


def group_pods(lws: Obj, group: int) -> list[tuple[str, Obj, dict[str, str]]]:
    """(pod name, pod template, labels) of one group: the leader NAME-GROUP and its workers NAME-GROUP-INDEX."""
    meta, template = lws["metadata"], lws["spec"]["leaderWorkerTemplate"]
    size = template.get("size", 1)
    pods = []
    for index in range(size):
        source = template["leaderTemplate"] if index == 0 and "leaderTemplate" in template else template["workerTemplate"]
        name = f"{meta['name']}-{group}" if index == 0 else f"{meta['name']}-{group}-{index}"
        pod_labels = {**(source.get("metadata") or {}).get("labels", {}), SET_NAME_LABEL: meta["name"],
                      GROUP_INDEX_LABEL: str(group), WORKER_INDEX_LABEL: str(index)}  # fmt: skip
        pods.append((name, copy.deepcopy(source), pod_labels))
    return pods
