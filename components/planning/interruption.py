"""What a spot interruption leaves a serving pod, and who handles it.

EC2 gives a spot instance a two-minute interruption notice (EC2 User Guide, "Spot Instance interruption
notices"), and usually a rebalance recommendation before it. On a spot managed node group EKS turns on
the Auto Scaling group's Capacity Rebalancing: on a recommendation it launches the replacement and,
once that node is Ready, cordons and drains the old one; a notice that comes first starts the drain at
once (EKS User Guide, "Managed node groups", Spot capacity type). A drained pod gets its
terminationGracePeriodSeconds, which includes its preStop hook (Kubernetes "Pod Lifecycle", Termination
of Pods), so a serving pod stops in time when that period fits inside the notice. Under Karpenter its SQS
interruption queue receives the notices (and rebalance, state-change, scheduled-change and capacity-reservation
interruption events) from EventBridge; it taints and drains the node and launches the replacement at once
(shared/reference/karpenter.md section 6).
"""

from __future__ import annotations

from dataclasses import dataclass

from inferstack.planning.node_groups import SPOT, plan_node_groups
from inferstack.spec import StackSpec

SPOT_NOTICE_SECONDS = 120
# A serving pod leaves the endpoints first (preStop), then vLLM finishes what it holds and exits.
PRE_STOP_SECONDS = 15
TERMINATION_GRACE_SECONDS = 90
HANDLED_BY = {
    "karpenter": "Karpenter: EventBridge sends the notice to its SQS interruption queue; it taints and drains the node "
                 "and launches the replacement at once",
    "managed node groups": "EKS managed node groups: Capacity Rebalancing on spot groups, a drain on the rebalance "
                           "recommendation once the replacement is Ready, or at the two-minute notice",
}


@dataclass(frozen=True)
class InterruptionBudget:
    notice_seconds: int
    pre_stop_seconds: int
    grace_seconds: int

    @property
    def spare_seconds(self) -> int:
        return self.notice_seconds - self.grace_seconds

    @property
    def fits(self) -> bool:
        return self.pre_stop_seconds < self.grace_seconds <= self.notice_seconds


SERVING_BUDGET = InterruptionBudget(SPOT_NOTICE_SECONDS, PRE_STOP_SECONDS, TERMINATION_GRACE_SECONDS)
# A serving NodePool's terminationGracePeriod: the whole notice. Karpenter deletes a do-not-disrupt pod at
# (node period - pod grace), so a serving pod starts stopping 30 s into the notice and is gone by its end.
SERVING_NODE_TERMINATION_GRACE = f"{SERVING_BUDGET.notice_seconds}s"


def spot_pools(spec: StackSpec) -> list[str]:
    """Pools with a spot node group, whose pods can get the two-minute notice."""
    return [pool.name for pool in spec.node_pools if any(p.capacity_type == SPOT for p in plan_node_groups(pool))]


def interruption_plan(spec: StackSpec) -> dict:
    """The plan's statement of the budget: which services can sit on spot nodes and how long they take to stop."""
    spot = spot_pools(spec)
    budget = SERVING_BUDGET
    return {
        "spot_pools": spot,
        "services_on_spot": [m.name for m in spec.models if m.pool in spot],
        "handled_by": HANDLED_BY["karpenter" if spec.platform.karpenter else "managed node groups"],
        "notice_seconds": budget.notice_seconds,
        "pre_stop_seconds": budget.pre_stop_seconds,
        "grace_seconds": budget.grace_seconds,
        "spare_seconds": budget.spare_seconds,
        "fits": budget.fits,
    }
