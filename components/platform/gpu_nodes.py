"""What the platform layer derives from the GPU pools, as plain data: taints to tolerate, the MIG strategy,
the mig-parted config and the device-plugin sharing configs.

Pure functions of the spec, so tests read them without an engine and the node labels the AWS layer sets
(`nvidia.com/mig.config`, `nvidia.com/device-plugin.config`) name keys that exist here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

from inferstack.conventions import GPU_TAINT_KEY
from inferstack.spec import MigSharing, MpsSharing, NodePoolSpec, StackSpec, TimeSlicing
from inferstack.spec.pools import WHOLE_GPU

MIG_DISABLED = "all-disabled"  # the mig-parted config the operator applies to unlabelled MIG-capable nodes
# Device-plugin config for nodes without a sharing label; the dot keeps it apart from every pool name.
WHOLE_GPU_CONFIG = "inferstack.whole-gpus"


def mig_config_name(pool_name: str) -> str:
    """The mig-parted config (and `nvidia.com/mig.config` node label value) of one MIG pool."""
    return f"inferstack-{pool_name}"


def device_plugin_config_name(pool_name: str) -> str:
    """The device-plugin config key (and `nvidia.com/device-plugin.config` label value) of one shared pool."""
    return pool_name


def gpu_tolerations(pools: Iterable[NodePoolSpec]) -> list[dict[str, str]]:
    """Tolerations that let a pod onto these GPU pools: the GPU taint and each pool's extra taints, once each."""
    tolerations = [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    for pool in pools:
        for taint in pool.taints:
            toleration = {"key": taint.key, "operator": "Exists", "effect": taint.effect}
            if taint.value is not None:
                toleration = {"key": taint.key, "operator": "Equal", "value": taint.value, "effect": taint.effect}
            if toleration not in tolerations:
                tolerations.append(toleration)
    return tolerations


def mig_strategy(spec: StackSpec) -> str:
    """The cluster-wide MIG strategy: the MIG pools' (validation checks they agree: platform/refusals.py), 'none' without MIG pools."""
    strategies = {p.gpu_sharing.strategy for p in spec.node_pools if isinstance(p.gpu_sharing, MigSharing)}
    if len(strategies) > 1:
        raise ValueError(f"MIG pools disagree on the strategy: {sorted(strategies)}")
    return strategies.pop() if strategies else "none"


def mig_parted_config(spec: StackSpec) -> dict[str, Any]:
    """mig-parted `config.yaml`: MIG off by default, and one layout per MIG pool applied to all its GPUs."""
    configs: dict[str, Any] = {MIG_DISABLED: [{"devices": "all", "mig-enabled": False}]}
    for pool in spec.node_pools:
        sharing = pool.gpu_sharing
        if isinstance(sharing, MigSharing):
            configs[mig_config_name(pool.name)] = [
                {"devices": "all", "mig-enabled": True, "mig-devices": dict(sharing.layout)}
            ]
    return {"version": "v1", "mig-configs": configs}


def device_plugin_configs(spec: StackSpec) -> dict[str, dict[str, Any]]:
    """Device-plugin configs by key: whole GPUs by default, and time-slicing or MPS replicas per shared pool.

    Shared GPUs are renamed to nvidia.com/gpu.shared (`renameByDefault`), so a pod asking for a whole GPU
    never lands on a slice of one. MPS shares only nvidia.com/gpu: the plugin refuses MPS on MIG devices.
    """
    flags = {"migStrategy": mig_strategy(spec)}
    configs: dict[str, dict[str, Any]] = {WHOLE_GPU_CONFIG: {"version": "v1", "flags": flags}}
    for pool in spec.node_pools:
        sharing = pool.gpu_sharing
        if isinstance(sharing, TimeSlicing):
            # Two replicas of a time-sliced GPU are still one GPU: fail such requests instead of granting them.
            mode = {
                "timeSlicing": {
                    "renameByDefault": True,
                    "failRequestsGreaterThanOne": True,
                    "resources": [{"name": WHOLE_GPU, "replicas": sharing.replicas}],
                }
            }
        elif isinstance(sharing, MpsSharing):
            mode = {"mps": {"renameByDefault": True, "resources": [{"name": WHOLE_GPU, "replicas": sharing.replicas}]}}
        else:
            continue
        configs[device_plugin_config_name(pool.name)] = {"version": "v1", "flags": flags, "sharing": mode}
    return configs


def dump_yaml(document: Any) -> str:
    """YAML the way the operator's config files are written: block style, keys in the order given."""
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False)
