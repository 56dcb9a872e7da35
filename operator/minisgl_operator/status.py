"""Pure functions: the Deployment (and any error) -> the InferenceService's status.

A condition keeps its lastTransitionTime while its status stays the same, so computing the status
twice from the same Deployment gives the same dict, and the reconciler writes nothing.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import constants

Obj = dict[str, Any]


@dataclass(frozen=True)
class Problem:
    """Why an InferenceService is Degraded, as the condition and the Event say it."""

    reason: str
    message: str


def combine(problems: list[Problem]) -> Problem | None:
    """Several problems as one condition: the first one's reason, every message."""
    if not problems:
        return None
    return Problem(problems[0].reason, "; ".join(p.message for p in problems))


# Why a container does not run, as the kubelet says it (containerStatuses[].state.waiting.reason),
# in the order the status reports them: the first one found wins.
WAITING_REASONS = (
    "CreateContainerConfigError",  # e.g. the HF token Secret or a key in it does not exist
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerError",
    "RunContainerError",
    "CrashLoopBackOff",
)


def _seconds_between(since: str | None, now: str | None) -> float | None:
    if not since or not now:
        return None
    parse = datetime.datetime.fromisoformat
    return (parse(now.replace("Z", "+00:00")) - parse(since.replace("Z", "+00:00"))).total_seconds()


# What the scheduler says of a volume a new node would not fix (a Multi-Attach, a zone-bound
# volume, a missing claim).
_NOT_CAPACITY = ("Multi-Attach", "volume node affinity conflict", "persistentvolumeclaim")


def _unschedulable(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and cond.get("reason") == "Unschedulable":
            return cond
    return None


def _waits_for_capacity(cond: Mapping[str, Any], now: str | None) -> bool:
    """Short of a resource ('Insufficient nvidia.com/gpu'), which a new node gives, and not for long.
    A volume that attaches elsewhere or is missing is no question of capacity: a new node would not help."""
    message = cond.get("message") or ""
    if "Insufficient " not in message or any(sign in message for sign in _NOT_CAPACITY):
        return False
    waited = _seconds_between(cond.get("lastTransitionTime"), now)
    return waited is not None and waited < constants.CAPACITY_WAIT_SECONDS


def capacity_wait(pods: list[Mapping[str, Any]], now: str | None) -> str | None:
    """Why the rollout waits, while pods have been Unschedulable for less than CAPACITY_WAIT_SECONDS:
    a node autoscaler may be booting a GPU node for them (a scale-up is not a failure)."""
    for pod in pods:
        cond = _unschedulable(pod)
        if cond is not None and not (pod.get("metadata") or {}).get("deletionTimestamp") and _waits_for_capacity(cond, now):
            name = (pod.get("metadata") or {}).get("name", "?")
            return (f"pod {name} waits for a node with room for it (up to {constants.CAPACITY_WAIT_SECONDS} s for a node "
                    f"autoscaler to add one): {cond.get('message', '')}").rstrip(": ")  # fmt: skip
    return None


def _pod_problems(pod: Mapping[str, Any], now: str | None = None) -> list[Problem]:
    meta, pod_status = pod.get("metadata") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp"):
        return []  # an old pod on its way out
    name = meta.get("name", "?")
    found = []
    cond = _unschedulable(pod)
    if cond is not None and not _waits_for_capacity(cond, now):
        found.append(Problem("Unschedulable", f"pod {name} cannot be scheduled: {cond.get('message', '')}".rstrip(": ")))
    # Init containers first: one that fails (an adapter download without its token) keeps the server
    # container from ever starting.
    for container in [*(pod_status.get("initContainerStatuses") or []), *(pod_status.get("containerStatuses") or [])]:
        state, last = container.get("state") or {}, container.get("lastState") or {}
        waiting = state.get("waiting") or {}
        terminated = last.get("terminated") or state.get("terminated") or {}
        where = f"pod {name}: container {container.get('name')}"
        if terminated.get("reason") == "OOMKilled" and (waiting or not container.get("ready")):
            found.append(Problem("OOMKilled", f"{where} ran out of memory (raise spec.resources memory)"))
        elif waiting.get("reason") in WAITING_REASONS:
            said = f"{where}: {waiting['reason']} {waiting.get('message') or ''}".rstrip()
            if terminated.get("message"):  # its log's tail (terminationMessagePolicy FallbackToLogsOnError)
                said += f"; it last said: {_tail(terminated['message'])}"
            found.append(Problem(waiting["reason"], said))
    return found


def _tail(message: str, limit: int = 400) -> str:
    """The end of a crashed container's message (a traceback ends with its error), on one line."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    text = " | ".join(lines[-3:])
    return text if len(text) <= limit else "..." + text[-limit:]


_PRIORITY = ("Unschedulable", "OOMKilled", *WAITING_REASONS)


def pod_problem(pods: list[Mapping[str, Any]], now: str | None = None) -> Problem | None:
    """What keeps the InferenceService's pods from running, from the pods themselves: a Deployment's
    conditions only say 'progressing' until its deadline, whatever the reason."""
    found = [p for pod in pods for p in _pod_problems(pod, now)]
    found.sort(key=lambda p: _PRIORITY.index(p.reason))
    return found[0] if found else None


def _deployment_facts(deployment: Mapping[str, Any] | None) -> dict[str, Any]:
    status = (deployment or {}).get("status") or {}
    generation = (deployment or {}).get("metadata", {}).get("generation", 0)
    conditions = {cond.get("type"): cond for cond in status.get("conditions") or []}
    return {
        "exists": deployment is not None,
        "observed": "observedGeneration" in status,
        "current": status.get("observedGeneration", -1) >= generation,
        "replicas": int(status.get("replicas") or 0),
        "ready": int(status.get("readyReplicas") or 0),
        "updated": int(status.get("updatedReplicas") or 0),
        "conditions": conditions,
    }


def _deployment_problem(facts: Mapping[str, Any]) -> Problem | None:
    progressing = facts["conditions"].get("Progressing", {})
    if progressing.get("reason") == "ProgressDeadlineExceeded":
        return Problem("ProgressDeadlineExceeded", progressing.get("message", "the rollout made no progress"))
    failure = facts["conditions"].get("ReplicaFailure", {})
    if failure.get("status") == "True":
        return Problem("ReplicaFailure", failure.get("message", "pods could not be created"))
    return None


def _condition(type_: str, ok: bool, reason: str, message: str) -> Obj:
    return {"type": type_, "status": "True" if ok else "False", "reason": reason, "message": message}


def compute(
    *,
    url: str,
    selector: str,
    generation: int,
    desired_replicas: int,
    deployment: Mapping[str, Any] | None,
    problem: Problem | None,
    previous: Mapping[str, Any] | None,
    now: str,
    picker: Mapping[str, Any] | None = None,
    loading: str | None = None,
    pod_resources: Mapping[str, Any] | None = None,
    capacity: str | None = None,
) -> Obj:
    """``picker``: the router's endpoint picker Deployment, when spec.router asks for one;
    ``loading``: why the workload waits for the model cache's loader Job, while it does;
    ``pod_resources``: what each server pod requests of its node, and why (sizing.summary);
    ``capacity``: why pods wait for a node (capacity_wait), while they may."""
    facts = _deployment_facts(deployment)
    # A pod's own reason (Unschedulable, ImagePullBackOff, ...) says more than the deadline's.
    problem = problem or _deployment_problem(facts)
    ready, desired = facts["ready"], desired_replicas
    rolled_out = (
        facts["current"]
        and facts["updated"] >= desired
        and facts["replicas"] == desired
        and ready >= desired
    )

    if ready >= 1:
        ready_cond = _condition(
            constants.CONDITION_READY,
            True,
            "AllReplicasReady" if ready >= desired else "MinimumReplicasReady",
            f"{ready}/{desired} replicas ready",
        )
    elif desired == 0:
        ready_cond = _condition(constants.CONDITION_READY, False, "ScaledToZero", "spec.replicas is 0")
    elif not facts["exists"]:
        ready_cond = _condition(constants.CONDITION_READY, False, "DeploymentMissing", "the Deployment does not exist yet")
    else:
        ready_cond = _condition(constants.CONDITION_READY, False, "NoReplicasReady", f"0/{desired} replicas ready")

    picker_down = picker is not None and int((picker.get("status") or {}).get("availableReplicas") or 0) < 1
    if picker_down and ready >= 1:
        # The pods serve, but the gateway reaches them through the picker: not Ready until one is up.
        ready_cond = _condition(
            constants.CONDITION_READY, False, "EndpointPickerUnavailable",
            f"{ready}/{desired} replicas ready, but no endpoint picker is available: the gateway cannot route to them",
        )  # fmt: skip

    if problem is not None:
        progressing_cond = _condition(constants.CONDITION_PROGRESSING, False, problem.reason, "the rollout is stopped: see Degraded")
        degraded_cond = _condition(constants.CONDITION_DEGRADED, True, problem.reason, problem.message)
    else:
        degraded_cond = _condition(constants.CONDITION_DEGRADED, False, "AsExpected", "")
        if loading is not None:
            progressing_cond = _condition(constants.CONDITION_PROGRESSING, True, "LoadingModel", loading)
        elif capacity is not None:
            progressing_cond = _condition(constants.CONDITION_PROGRESSING, True, "WaitingForCapacity", capacity)
        elif rolled_out:
            progressing_cond = _condition(constants.CONDITION_PROGRESSING, False, "RolloutComplete", f"{desired} replicas up to date")
        else:
            progressing_cond = _condition(
                constants.CONDITION_PROGRESSING,
                True,
                "RollingOut",
                f"{facts['updated']}/{desired} replicas updated, {ready} ready",
            )

    if problem is not None:
        phase = constants.PHASE_DEGRADED
    elif desired == 0 and facts["replicas"] == 0 and facts["exists"]:
        phase = constants.PHASE_SCALED_TO_ZERO
    elif not facts["observed"]:
        phase = constants.PHASE_PENDING
    elif loading is not None:
        phase = constants.PHASE_PROGRESSING if facts["exists"] else constants.PHASE_PENDING
    elif rolled_out and not picker_down:
        phase = constants.PHASE_READY
    else:
        phase = constants.PHASE_PROGRESSING

    old = {cond.get("type"): cond for cond in (previous or {}).get("conditions") or []}
    conditions = []
    for cond in (ready_cond, progressing_cond, degraded_cond):
        before = old.get(cond["type"])
        same = before is not None and before.get("status") == cond["status"]
        cond["lastTransitionTime"] = before.get("lastTransitionTime", now) if same else now
        cond["observedGeneration"] = generation
        conditions.append(cond)

    computed = {
        "phase": phase,
        "replicas": facts["replicas"],
        "readyReplicas": ready,
        "selector": selector,
        "url": url,
        "observedGeneration": generation,
        "conditions": conditions,
    }
    if pod_resources is not None:
        computed["podResources"] = dict(pod_resources)
    return computed


def changed(previous: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    previous = previous or {}
    return any(previous.get(key) != value for key, value in new.items())


def degraded(status_: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The Degraded condition of a status when it is True."""
    for cond in (status_ or {}).get("conditions") or []:
        if cond.get("type") == constants.CONDITION_DEGRADED and cond.get("status") == "True":
            return cond
    return None
