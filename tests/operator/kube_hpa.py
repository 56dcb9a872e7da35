"""The HorizontalPodAutoscaler controller's replica decision, as the fake API plays it (``FakeKube.run_hpa``).

From kubernetes ``pkg/controller/podautoscaler/horizontal.go`` (``reconcileAutoscaler``): with the
target's scale subresource at zero replicas and ``minReplicas`` not zero, autoscaling is disabled for
it: the controller sets ``ScalingActive=False, ScalingDisabled`` ("scaling is disabled since the
replica count of the target is zero") and leaves the replicas alone, whatever its metrics say. Else a
count above ``maxReplicas`` or below ``minReplicas`` (default 1) is brought within them, and a count
within them follows the metrics (here: the count a test says they ask for), clamped to the bounds.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]
DISABLED = {"type": "ScalingActive", "status": "False", "reason": "ScalingDisabled",
            "message": "scaling is disabled since the replica count of the target is zero"}  # fmt: skip


def decide(hpa: Obj, current: int, wanted_by_metrics: int | None) -> tuple[int, list[Obj]]:
    """(the replicas the HPA sets, its conditions) for a target at ``current`` replicas."""
    spec = hpa["spec"]
    minimum, maximum = spec.get("minReplicas", 1), spec["maxReplicas"]
    able = {"type": "AbleToScale", "status": "True", "reason": "SucceededGetScale"}
    if current == 0 and minimum != 0:
        return 0, [able, DISABLED]
    if current > maximum:
        desired = maximum
    elif current < minimum:
        desired = minimum
    else:
        desired = min(max(wanted_by_metrics if wanted_by_metrics is not None else current, minimum), maximum)
    return desired, [able, {"type": "ScalingActive", "status": "True", "reason": "ValidMetricFound"}]
