"""GPU sharing as the GPU operator receives it (mig-parted layouts, device-plugin configs), and the specs the
platform cannot deploy, each rejected with its field path and a message that names the fix."""

from __future__ import annotations

import pytest
from platform_recording import build as build_spec

from inferstack.platform.gpu_nodes import (
    WHOLE_GPU_CONFIG,
    device_plugin_configs,
    mig_config_name,
    mig_parted_config,
    mig_strategy,
)
from inferstack.conventions import DEVICE_PLUGIN_CONFIG_LABEL, MIG_CONFIG_LABEL
from inferstack.platform.kueue import manager_config
from inferstack.spec import SpecError
from inferstack.spec.pools import PoolHardware
from inferstack.validation import validate


def build(change=None):
    """The spec of `platform_recording.build`, checked by every layer as a deploy would."""
    return validate(build_spec(change)).written


def pool(name: str, instance_type: str, sharing: dict, **extra) -> dict:
    return {"name": name, "instance_types": [instance_type], "max_nodes": 2, "gpu_sharing": sharing, **extra}


@pytest.mark.parametrize(
    ("instance_type", "layout"),
    [
        ("p4d.24xlarge", {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}),  # A100-40GB
        ("p4de.24xlarge", {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),  # A100-80GB
        ("p5e.48xlarge", {"3g.71gb": 2}),  # H200
        ("p6-b200.48xlarge", {"1g.23gb": 7}),  # B200
    ],
)
def test_each_mig_pool_gets_its_own_layout_for_all_its_gpus(instance_type, layout):
    def change(s):
        s["region"] = "us-west-2"  # offers every catalog type; us-east-1 has no p5e.48xlarge
        s["node_pools"][1] = pool("mig", instance_type, {"mode": "mig", "layout": layout})

    spec = build(change)
    configs = mig_parted_config(spec)["mig-configs"]
    assert configs["all-disabled"] == [{"devices": "all", "mig-enabled": False}]
    assert configs[mig_config_name("mig")] == [{"devices": "all", "mig-enabled": True, "mig-devices": layout}]


def test_mps_shares_only_whole_gpus_and_renames_them_shared():
    def change(s):
        s["node_pools"][1] = pool("mps", "g6e.xlarge", {"mode": "mps", "replicas": 4})

    spec = build(change)
    mps = device_plugin_configs(spec)["mps"]["sharing"]["mps"]
    assert mps == {"renameByDefault": True, "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}
    assert mig_strategy(spec) == "none"


def test_whole_gpu_pools_use_the_default_device_plugin_config():
    configs = device_plugin_configs(build())
    assert set(configs) == {WHOLE_GPU_CONFIG, "l4"}
    assert "sharing" not in configs[WHOLE_GPU_CONFIG]
    assert {c["flags"]["migStrategy"] for c in configs.values()} == {"mixed"}


def test_nodes_are_labelled_with_configs_the_gpu_operator_has():
    """The AWS layer labels each pool's nodes; a label naming a config that does not exist leaves GPUs unshared."""
    node_pool = pytest.importorskip("inferstack.aws.node_pool")
    spec = build()
    mig_configs = mig_parted_config(spec)["mig-configs"]
    plugin_configs = device_plugin_configs(spec)
    selected = []
    for p in spec.node_pools:
        labels = node_pool.node_labels(p, PoolHardware(p), "spot")
        if MIG_CONFIG_LABEL in labels:
            selected.append(labels[MIG_CONFIG_LABEL] in mig_configs)
        if DEVICE_PLUGIN_CONFIG_LABEL in labels:
            selected.append(labels[DEVICE_PLUGIN_CONFIG_LABEL] in plugin_configs)
    assert selected == [True, True]  # the MIG pool and the time-sliced pool


def test_kueue_integrates_deployments_and_leaderworkersets_in_the_stack_namespaces_only():
    config = manager_config(build(lambda s: s.update(queues={"fair_sharing": True})))
    frameworks = set(config["integrations"]["frameworks"])
    assert {"pod", "deployment", "leaderworkerset.x-k8s.io/leaderworkerset"} <= frameworks
    assert config["managedJobsNamespaceSelector"]["matchExpressions"][0]["values"] == ["batch", "inference"]
    assert config["fairSharing"]["preemptionStrategies"]
    assert "fairSharing" not in manager_config(build())


def rejection(change) -> SpecError:
    with pytest.raises(SpecError) as caught:
        validate(build_spec(change))
    return caught.value


def test_a_mig_profile_of_another_gpu_is_rejected():
    error = rejection(lambda s: s["node_pools"][1]["gpu_sharing"].update(layout={"3g.71gb": 2}))
    assert error.path == "node_pools[1].gpu_sharing.layout.3g.71gb"
    assert "'3g.71gb' is not a MIG profile of A100-80GB" in str(error)


def test_more_slices_than_a_gpu_holds_are_rejected():
    error = rejection(lambda s: s["node_pools"][1]["gpu_sharing"].update(layout={"3g.40gb": 2, "2g.20gb": 1}))
    assert error.path == "node_pools[1].gpu_sharing.layout"
    assert "the layout needs 8 compute" in str(error) and "drop or shrink slices" in str(error)


def test_more_of_one_profile_than_a_gpu_holds_is_rejected():
    error = rejection(lambda s: s["node_pools"][1]["gpu_sharing"].update(layout={"3g.40gb": 3}))
    assert "3 x 3g.40gb but a A100-80GB holds at most 2" in str(error)


def test_a_mig_slice_on_an_mps_pool_is_rejected():
    def change(s):
        s["node_pools"][1] = pool("mps", "g6e.xlarge", {"mode": "mps"})
        s["models"] = [{"name": "embed", "model": "BAAI/bge-large-en-v1.5", "pool": "mps", "mig_profile": "1g.10gb",
                        "max_model_len": 512}]

    error = rejection(change)
    assert error.path == "models[0].mig_profile"
    assert "pool 'mps' is not partitioned with MIG (gpu_sharing is 'mps')" in str(error)


def test_mig_pools_with_different_strategies_are_rejected():
    def change(s):
        s["node_pools"].append(pool("h100-mig", "p5.48xlarge", {"mode": "mig", "strategy": "single",
                                                                 "layout": {"3g.40gb": 2}}))

    error = rejection(change)
    assert error.path == "node_pools[3].gpu_sharing.strategy"
    assert "one MIG strategy to the whole cluster" in str(error)
    assert "pool 'a100-mig' uses 'mixed' and pool 'h100-mig' uses 'single'" in str(error)


def test_mps_beside_a_mixed_mig_strategy_is_rejected():
    error = rejection(lambda s: s["node_pools"][2].update(gpu_sharing={"mode": "mps"}))
    assert error.path == "node_pools[2].gpu_sharing.mode"
    assert "refuses MPS when the cluster's MIG strategy is 'mixed'" in str(error)
    assert "strategy 'single' on the MIG pools" in str(error)


def test_a_quota_beyond_what_the_pool_can_hold_is_rejected():
    error = rejection(lambda s: s.update(queues={"cluster_queues": [
        {"name": "serving", "role": "serving", "quota_gpus": {"a100-mig": 17}},
        {"name": "batch", "role": "batch"},
    ]}))
    assert error.path == "queues.cluster_queues[0].quota_gpus.a100-mig"
    assert "quota 17 is more than pool 'a100-mig' can ever hold: 1 nodes x 16 devices = 16" in str(error)
