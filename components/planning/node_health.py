"""GPU node health: where the EKS node monitoring agent watches the GPUs, what it is configured with, what
repairs a sick node, and what one failed node costs each pool (node_repair.json: where repair stops).

The agent (an EKS add-on) sets the node conditions node auto repair acts on; AcceleratedHardwareReady, the
GPU one, is set only by it (shared/reference/karpenter.md sections 8 and B). It reads the GPUs through the
DCGM host engine its `dcgm-server` DaemonSet runs (nv-hostengine, hostPort 5555), a second engine beside the
one embedded in the GPU operator's dcgm-exporter. Two engines are safe because the agent watches no profiling
field, and the profiling module is the one an engine holds exclusively per GPU (agent issue #256).

MIG pools get neither the agent nor its engine: mig-manager enables MIG mode on every new node, and the GPU
reset that needs fails while another process holds the GPU (mig-parted issue #181: "In use by another client
... a monitoring application"). Keeping the engine off the node for the reset is no answer either, since the
agent then reports DCGMError, which never clears (agent issue #266), and repair would replace the node in a
loop. Those nodes are still repaired when they stop being Ready.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.resources import files
from typing import Any, Mapping

from inferstack.catalog.charts import eks_addon_versions
from inferstack.conventions import POOL_LABEL, SHARING_LABEL
from inferstack.planning.node_groups import plan_node_groups
from inferstack.spec import CreateCluster, MigSharing, NodePoolSpec, StackSpec

FACTS: Mapping[str, Any] = json.loads(
    files("inferstack.catalog").joinpath("node_monitoring_agent.json").read_text(encoding="utf-8")
)
REPAIR_HALTS: Mapping[str, Any] = json.loads(
    files("inferstack.catalog").joinpath("node_repair.json").read_text(encoding="utf-8")
)
ADDON = FACTS["addon"]
GPU_CONDITION = "AcceleratedHardwareReady"
MIG = "mig"  # the gpu-sharing node label of a MIG pool (aws/node_pool.node_labels)
_ARCH = "kubernetes.io/arch"


@dataclass(frozen=True)
class PoolHealth:
    pool: str
    gpu_monitored: bool
    why: str              # what watches the pool's GPUs, or why nothing does
    repair: str           # what replaces a sick node, or 'off'
    one_node_fails: str   # what happens to the pool and its replicas when one of its nodes fails


def installs_agent(spec: StackSpec) -> bool:
    """The stack installs the add-on on clusters it creates; an existing cluster's add-ons are its owner's."""
    return spec.platform.node_monitoring_agent and isinstance(spec.cluster, CreateCluster)


def gpu_monitored(pool: NodePoolSpec) -> bool:
    return not isinstance(pool.gpu_sharing, MigSharing)


def pool_health(spec: StackSpec, pool: NodePoolSpec) -> PoolHealth:
    provider = "Karpenter (NodeRepair)" if spec.platform.karpenter else "EKS node auto repair"
    minutes = FACTS["repair_after_minutes"]
    watched = installs_agent(spec) and gpu_monitored(pool)
    if watched:
        why = f"{ADDON} (DCGM policies and health checks: XID, ECC, NVLink, fabric) sets {GPU_CONDITION}"
    elif not spec.platform.node_monitoring_agent:
        why = "not watched: platform.node_monitoring_agent is off"
    elif not isinstance(spec.cluster, CreateCluster):
        why = (f"watched only if the existing cluster runs the {ADDON} add-on with its dcgm-server tolerating the GPU "
               "taint (by default it tolerates none, and the agent's lasting DCGMError then has repair replace "
               "the node)")
    else:
        why = ("not watched: MIG nodes run no DCGM host engine, which would block the GPU reset mig-manager needs "
               "to enable MIG mode")
    if watched:
        after = (f"{minutes[GPU_CONDITION]} min after {GPU_CONDITION} turns False, "
                 f"{minutes['Ready']} min after it stops being Ready")
    else:
        after = f"{minutes['Ready']} min after it stops being Ready"
    repair = f"{provider} replaces a node {after}" if pool.auto_repair else "off"
    return PoolHealth(pool.name, watched, why, repair, one_node_fails(spec, pool, f"{provider} replaces it {after}"))


def managed_group_halts_at(nodes: int) -> int | None:
    """Unhealthy nodes at which EKS's default stops repairing a managed node group of `nodes` nodes: more than
    five nodes with more than 20% of them unhealthy; None when the group is too small ever to stop."""
    rule = REPAIR_HALTS["managed_node_group_halt"]
    if nodes <= rule["more_than_nodes"]:
        return None
    return nodes * rule["more_than_percent"] // 100 + 1


def one_node_fails(spec: StackSpec, pool: NodePoolSpec, replaced: str) -> str:
    """What one failed node costs: who replaces it and when, where repair would stop, and the multi-node
    replicas it takes down whole (LeaderWorkerSet RecreateGroupOnPodRestart recreates every pod of the group
    when one fails, kubernetes-sigs/lws api/leaderworkerset/v1 RestartPolicyType)."""
    if not pool.auto_repair:
        fate = "not repaired: auto_repair is off, the node stays until replaced by hand"
    elif spec.platform.karpenter:
        percent = REPAIR_HALTS["karpenter_halt"]["more_than_percent_rounded_up"]
        fate = (f"repaired: {replaced}; Karpenter stops only once more than {percent}% (rounded up) of a "
                "NodePool's nodes are unhealthy, so one node is always repaired")
    else:
        stops = [
            f"{group.suffix} (up to {group.max_size} nodes) from {at} unhealthy nodes"
            for group in plan_node_groups(pool) if (at := managed_group_halts_at(group.max_size))
        ]
        smallest = REPAIR_HALTS["managed_node_group_halt"]["more_than_nodes"]
        fate = f"repaired: {replaced}, one node at a time; " + (
            f"EKS would stop repairing {', '.join(stops)}" if stops
            else f"EKS stops repairing only a group of more than {smallest} nodes, and none is that large"
        )
    whole = [f"{m.name} ({m.nodes_per_replica} nodes)" for m in spec.models if m.pool == pool.name and m.multi_node]
    if whole:
        fate += (f"; a replica of {', '.join(whole)} on the node goes down whole and restarts once the "
                 "replacement has joined and loaded the model")
    return fate


def node_health_plan(spec: StackSpec) -> dict[str, Any]:
    """The plan's statement: whether the agent is installed, and per pool what watches and repairs its nodes."""
    return {
        "agent": {"addon": ADDON, "version": eks_addon_versions()[spec.cluster.kubernetes_version][ADDON]}
        if installs_agent(spec) else None,
        "pools": [vars(pool_health(spec, pool)) for pool in spec.node_pools],
    }


def _kept_terms(architectures: list[str]) -> list[dict[str, Any]]:
    """The upstream chart's placement terms, which an affinity override replaces and so must repeat."""
    excluded = [
        {"key": key, "operator": "NotIn", "values": list(values)}
        for key, values in FACTS["agent_excluded_compute_types"].items()
    ]
    return [*excluded, {"key": _ARCH, "operator": "In", "values": list(architectures)}]


def _required(terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": terms}]
    }}}


def agent_configuration() -> dict[str, Any]:
    """The add-on's configuration values (its schema: charts/configuration.schema.json at v1.7.0).

    The agent runs on every node but MIG nodes. Its DCGM host engine runs on the other GPU nodes, told apart by
    the labels every GPU node registers with (pool, sharing mode), so the engine is up inside the agent's
    one-minute start grace; the terms name no pool, so adding or renaming one never restarts the engines. The
    engine tolerates every taint, as the agent does: the chart tolerates none and GPU nodes are tainted.
    """
    not_mig = {"key": SHARING_LABEL, "operator": "NotIn", "values": [MIG]}
    agent_terms = [*_kept_terms(FACTS["agent_architectures"]), not_mig]
    engine_terms = [*_kept_terms(FACTS["dcgm_server_architectures"]), {"key": POOL_LABEL, "operator": "Exists"}, not_mig]
    return {
        "nodeAgent": {"affinity": _required(agent_terms)},
        "dcgmAgent": {"affinity": _required(engine_terms), "tolerations": [{"operator": "Exists"}]},
    }


def agent_configuration_json() -> str:
    """As EKS takes it: a JSON document, keys sorted so it never shows a diff."""
    return json.dumps(agent_configuration(), sort_keys=True)
