"""The policy pack over the DRA example stack (stacks/dra.py): claims count as the devices they allocate, nodes
offer devices only through the mechanism that runs on them, and EFA claims pair with their GPU's PCIe root."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from pulumi_policy import StackValidationPolicy
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE

from inferstack.aws.node_template import RESOURCE_TAG
from inferstack.policies.autoscaler_templates import expected_tags
from inferstack.policies.pools import node_groups, workloads
from inferstack.policies.rules import POLICIES
from inferstack.policies.runner import run_policies, spec_policy_config
from inferstack.stacks import load_stack
from test_policies import STACKS, _as_inputs, _mutated, check, failing, find, messages, rendered

LONG = "LeaderWorkerSet inference/llama-70b-long-group"


def _template(resources: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The ResourceClaimSpec of a rendered ResourceClaimTemplate."""
    return find(resources, "ResourceClaimTemplate", name)["inputs"]["spec"]["spec"]


def _pod_spec(resources: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return find(resources, kind, name)["inputs"]["spec"]["template"]["spec"]


def _efa_plugin(values: dict[str, Any]) -> dict[str, Any]:
    """The prod stack's EFA device plugin release (pinned as the program pins it) with other values."""
    release = copy.deepcopy(find(rendered("prod"), "Release", "prod-platform-efa-release"))
    release.update(name="dra-platform-efa-release", parent=None, depends_on=[])
    release["inputs"]["values"] = values
    return release


def test_the_dra_stack_passes_and_counts_claimed_devices():
    """Each pod entry of spec.resourceClaims is one claim generated from its template (kubernetes
    pkg/controller/resourceclaim), allocated whole on the pod's node: 8 claims of 1 GPU + 4 EFA devices
    are 8 nvidia.com/gpu and 32 vpc.amazonaws.com/efa, as kueue's deviceClassMappings count them
    (kueue v0.19.2 pkg/dra/claims.go)."""
    spec = load_stack(STACKS, "dra")
    seen: dict[str, Any] = {}

    def probe(args, report):
        seen["groups"] = {
            g.name: (g.advertised, g.plugin_resources, g.claimable,
                     {device: [(m.kind, str(m)) for m in handed_by] for device, handed_by in g.mechanisms.items()})
            for g in node_groups(args.resources)
        }
        seen["requests"] = {
            (str(w), t.role): w.device_requests(t) for w in workloads(args.resources) for t in w.workload.templates
        }

    resources = rendered("dra")
    results = run_policies(resources, "dra", spec_policy_config(spec))
    assert [(r.name, v.message) for r in results for v in r.violations if r.blocking] == []
    run_policies(resources, "dra", policies=[StackValidationPolicy(name="probe", description="probe", validate=probe)])
    assert seen["requests"][(LONG, "leader")] == {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 32}
    assert seen["requests"][("Deployment inference/llama-70b", "pod")] == {"nvidia.com/gpu": 4}
    assert seen["groups"]["dra-h100-on-demand"] == (
        {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 32},
        {},
        {"gpu.nvidia.com": 8, "efa.networking.k8s.aws": 32},
        {"EFA devices": [("DRA driver", "the EFA DRA driver (release dra-platform-dra-efa)")],
         "GPUs": [("DRA driver", "the NVIDIA DRA driver (release dra-platform-dra-gpu)")]},
    )
    batch = seen["groups"]["dra-l40s-batch-spot"]
    assert batch[1] == batch[0] and batch[2] == {}
    assert batch[3] == {
        "GPUs": [("device plugin", "the GPU operator's device plugin (release dra-platform-gpu-operator-release)")]
    }


def test_an_efa_claim_without_the_pcie_root_constraint_fails(tmp_path, capsys):
    """k8s.io/dynamic-resource-allocation structured/allocator.go: a matchAttribute constraint makes the allocator
    pick only devices whose attribute is equal across the requests it names; without it any EFA device of the node
    may come with the GPU (issue 31: 6.04 vs 11.35 GB/s NCCL bandwidth)."""
    resources = rendered("dra")
    del _template(resources, "llama-70b-long-devices")["devices"]["constraints"]
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and failing(report) == {"efa-capable-image"}
    text = messages(report, "efa-capable-image")
    assert (
        f"{LONG} leader pods claim EFA devices from ResourceClaimTemplate inference/llama-70b-long-devices "
        "(request 'efa') that no constraint `matchAttribute: resource.kubernetes.io/pcieRoot` pairs with its GPU "
        "request 'gpu'" in text
    )
    assert "To fix: add constraints" in text


def test_a_constraint_on_another_attribute_does_not_pair(tmp_path, capsys):
    resources = rendered("dra")
    _template(resources, "llama-70b-long-devices")["devices"]["constraints"][0]["matchAttribute"] = "dra.net/numaNode"
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and f"{LONG} worker pods claim EFA devices" in messages(report, "efa-capable-image")


def test_the_claimed_gpus_must_match_the_vllm_flags(tmp_path, capsys):
    """vLLM 0.33 EngineArgs.create_engine_config: tensor_parallel 4 drives 4 GPUs of the node; the container sees
    the devices of the claims it names in resources.claims (KEP-4381), count x claims of them."""
    resources = rendered("dra")
    pod = _pod_spec(resources, "Deployment", "llama-70b")
    pod["resourceClaims"] = pod["resourceClaims"][:2]
    pod["containers"][0]["resources"]["claims"] = [{"name": "rank-0"}, {"name": "rank-1"}]
    _template(resources, "llama-70b-devices")["devices"]["requests"][0]["exactly"]["count"] = 2
    code, report = check(resources, tmp_path, capsys)
    assert code == 0, messages(report, "vllm-parallel-layout")               # 2 claims x 2 GPUs = tensor 4
    _template(resources, "llama-70b-devices")["devices"]["requests"][0]["exactly"]["count"] = 1
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and failing(report) == {"vllm-parallel-layout"}
    assert (
        "Deployment inference/llama-70b container 'vllm' requests 2 nvidia.com/gpu through 2 claims of "
        "ResourceClaimTemplate inference/llama-70b-devices but its vLLM flags need 4" in messages(report, "vllm-parallel-layout")
    )


def test_a_claim_of_a_template_the_stack_does_not_create_fails(tmp_path, capsys):
    """kubernetes pkg/scheduler/framework/plugins/dynamicresources: a pod whose claim cannot be generated from its
    template stays unschedulable; the pack then cannot count its devices, so it refuses rather than passing 0."""
    resources = [r for r in rendered("dra") if r["name"] != "dra-serving-llama-8b-fp8-devices"]
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and failing(report) == {"gpu-requests-advertised"}
    assert (
        "Deployment inference/llama-8b-fp8: claim 'rank-0' names ResourceClaimTemplate "
        "inference/llama-8b-fp8-devices, which the stack does not create" in messages(report, "gpu-requests-advertised")
    )


@pytest.mark.parametrize("edit, expected", [
    (lambda request: request["exactly"].update(deviceClassName="gpu.example.com"),
     "names DeviceClass 'gpu.example.com', which the catalog does not map to an extended resource"),
    (lambda request: request["exactly"].update(allocationMode="All"), "takes allocationMode All"),
    (lambda request: request.update(firstAvailable=[request.pop("exactly")]), "lists firstAvailable alternatives"),
])
def test_a_request_the_pack_cannot_count_fails(tmp_path, capsys, edit, expected):
    """kueue v0.19.2 pkg/dra/claims.go counts only ExactCount requests of a DeviceClass its deviceClassMappings name;
    catalog/dra.json holds the classes and the resource each counts as."""
    resources = rendered("dra")
    edit(_template(resources, "llama-8b-fp8-devices")["devices"]["requests"][0])
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and failing(report) == {"gpu-requests-advertised"}
    text = messages(report, "gpu-requests-advertised")
    assert "Deployment inference/llama-8b-fp8: claim 'rank-0': ResourceClaimTemplate inference/llama-8b-fp8-devices " \
           "request 'gpu' " + expected in text


def test_the_gpu_driver_must_select_the_pool(tmp_path, capsys):
    """dra-driver-nvidia-gpu templates/kubeletplugin.yaml places its kubelet plugin by kubeletPlugin.affinity: a node
    it does not select publishes no GPU ResourceSlice, so the claims there are never met."""
    resources = rendered("dra")
    release = find(resources, "Release", "dra-platform-dra-gpu")["inputs"]["values"]
    terms = release["kubeletPlugin"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] = ["l40s"]
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and "gpu-requests-advertised" in failing(report)
    text = messages(report, "gpu-requests-advertised")
    assert (f"{LONG} leader pods claim 8 gpu.nvidia.com devices but no node group they can run on offers it to "
            "claims (through a DRA driver)") in text
    assert "Deployment inference/llama-70b claim 4 gpu.nvidia.com devices but no node group" in text
    assert "Deployment inference/llama-8b-fp8" not in text


@pytest.mark.parametrize("labels", [
    {"keys": ["inferstack.dev/pool"], "values": ["h100"]},
    {"keys": ["node.kubernetes.io/instance-type"], "values": ["p5.48xlarge"]},
])
def test_the_efa_device_plugin_must_stay_off_a_dra_pool(tmp_path, capsys, labels):
    """aws/eks-charts stable/aws-efa-k8s-device-plugin templates/daemonset.yaml: each supportedInstanceLabels key
    becomes a `key In values` nodeSelectorTerm; the plugin there and aws-dranet (stable/aws-dranet
    templates/daemonset.yaml, the same terms) would both hand out the node's EFA devices."""
    resources = rendered("dra") + [_efa_plugin({"supportedInstanceLabels": labels})]
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and failing(report) == {"gpu-requests-advertised"}
    text = messages(report, "gpu-requests-advertised")
    assert "node group dra-h100-on-demand (pool h100, ON_DEMAND, " in text and (
        " nodes): its EFA devices are handed out by both the EFA device plugin (release dra-platform-efa-release) "
        "and the EFA DRA driver (release dra-platform-dra-efa), so one device can go to two pods. To fix:" in text
    )


def test_an_efa_device_plugin_on_other_pools_is_fine(tmp_path, capsys):
    resources = rendered("dra") + [_efa_plugin({"supportedInstanceLabels": {
        "keys": ["inferstack.dev/pool"], "values": ["l40s-batch"]}})]
    code, report = check(resources, tmp_path, capsys)
    assert code == 0, messages(report, "gpu-requests-advertised")


def test_a_dra_node_group_must_keep_the_operators_device_plugin_off(tmp_path, capsys):
    """NVIDIA/gpu-operator v26.7.0 controllers/state_manager.go keeps a node's nvidia.com/gpu.deploy.device-plugin
    label when it is set: 'false' keeps the operator's device plugin off; without it the plugin and the DRA driver
    both hand out the node's GPUs."""
    resources = rendered("dra")
    del find(resources, "NodeGroup", "dra-h100-on-demand")["inputs"]["labels"]["nvidia.com/gpu.deploy.device-plugin"]
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and failing(report) == {"gpu-requests-advertised"}
    text = messages(report, "gpu-requests-advertised")
    assert "node group dra-h100-on-demand (pool h100, ON_DEMAND, " in text and (
        " nodes): its GPUs are handed out by both the GPU operator's device plugin (release "
        "dra-platform-gpu-operator-release) and the NVIDIA DRA driver (release dra-platform-dra-gpu)" in text
    )
    assert "dra-l40s-on-demand" not in text and "dra-l40s-spot" not in text   # only the group that lost its label


def test_a_claim_pod_without_its_stack_gives_no_device_figures():
    """The rules that count devices are stack policies: a claim pod seen alone (as `pulumi preview` hands a
    resource policy one resource) neither crashes a rule nor passes a GPU count read without its templates; the
    claims that resolve to no template are reported even with no node group to compare with."""
    lws = find(rendered("dra"), "LeaderWorkerSet", "llama-70b-long-group")
    results = {r.name: r for r in run_policies([lws], "dra")}
    assert all(not r.violations for name, r in results.items() if name in (
        "vllm-parallel-layout", "efa-capable-image", "keda-scaling-bounds", "kueue-quotas-within-pools"))
    advertised = results["gpu-requests-advertised"]
    assert advertised.notes == ["not applicable: the stack creates no node groups, so what nodes advertise is not known"]
    assert advertised.violations and all(
        "names ResourceClaimTemplate inference/llama-70b-long-devices, which the stack does not create" in v.message
        for v in advertised.violations)


# ------------------------------------------------------------------------- issue 31 review: one mechanism per ask


def _dra_check(resources: list[dict[str, Any]]) -> dict[str, Any]:
    """Each policy's result over the DRA stack's resources, with the stack's policy config."""
    return {r.name: r for r in run_policies(resources, "dra", spec_policy_config(load_stack(STACKS, "dra")))}


def _groups(resources: list[dict[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def probe(args, report):
        seen.update({g.name: g for g in node_groups(args.resources)})

    run_policies(resources, "dra", policies=[StackValidationPolicy(name="probe", description="probe", validate=probe)])
    return seen


def test_a_claim_on_a_device_plugin_pool_never_schedules(tmp_path, capsys):
    """kubernetes pkg/scheduler/framework/plugins/dynamicresources allocates a claim only from the ResourceSlices a
    DRA driver publishes; a pool whose GPUs only the device plugin hands out has none, whatever its nvidia.com/gpu."""
    resources = rendered("dra")
    pod = _pod_spec(resources, "Deployment", "llama-8b-fp8")
    pod["nodeSelector"] = {"inferstack.dev/pool": "l40s-batch"}
    del pod["affinity"]["nodeAffinity"]
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and "gpu-requests-advertised" in failing(report)
    assert (
        "Deployment inference/llama-8b-fp8 claim 1 gpu.nvidia.com devices but no node group they can run on offers it "
        "to claims (through a DRA driver) (dra-l40s-batch-spot: nvidia.com/gpu=1 per node). To fix: run the pods on "
        "a device_mode 'dra' pool" in messages(report, "gpu-requests-advertised")
    )


def test_a_gpu_limit_on_a_dra_pool_never_schedules(tmp_path, capsys):
    """kubernetes pkg/scheduler/framework/plugins/noderesources/fit.go counts an nvidia.com/gpu limit against the
    node's allocatable; on a DRA node no device plugin advertises it (the driver's devices are ResourceSlices)."""
    resources = rendered("dra")
    pod = _pod_spec(resources, "Deployment", "llama-8b-fp8")
    del pod["resourceClaims"]
    container = pod["containers"][0]["resources"]
    del container["claims"]
    container["limits"]["nvidia.com/gpu"] = 1
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and failing(report) == {"gpu-requests-advertised"}
    assert (
        "Deployment inference/llama-8b-fp8 request 1 nvidia.com/gpu but no node group they can run on advertises it "
        "(dra-l40s-on-demand: 1 gpu.nvidia.com devices to claims per node;" in messages(report, "gpu-requests-advertised")
    )


def test_a_mig_claim_on_a_whole_gpu_pool_fails(tmp_path, capsys):
    """dra-driver-nvidia-gpu v0.4.0: a GPU without MIG is published as type 'gpu' (deviceclass-gpu.yaml selects it),
    only a MIG-enabled GPU's slices as type 'mig' (deviceclass-mig.yaml); a mig.nvidia.com claim on an L40S pool
    finds no device."""
    resources = rendered("dra")
    request = _template(resources, "llama-8b-fp8-devices")["devices"]["requests"][0]["exactly"]
    request["deviceClassName"] = "mig.nvidia.com"
    request.pop("selectors", None)
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and "gpu-requests-advertised" in failing(report)
    assert "Deployment inference/llama-8b-fp8 claim 1 mig.nvidia.com devices but no node group they can run on " \
           "offers it to claims" in messages(report, "gpu-requests-advertised")


def test_a_whole_gpu_claim_on_a_mig_pool_fails_and_a_slice_claim_fits():
    """A node mig-manager cuts (nvidia.com/mig.config naming a mig-parted config of the operator's migManager
    ConfigMap, here 7 1g.10gb slices per H100) has its GPUs published by dra-driver-nvidia-gpu as mig.nvidia.com
    devices, one per slice, and no gpu.nvidia.com device (cmd/gpu-kubelet-plugin/mig.go)."""
    resources = rendered("dra")
    operator = find(resources, "Release", "dra-platform-gpu-operator-release")["inputs"]["values"]
    operator["migManager"]["config"]["data"]["config.yaml"] += (
        "  all-1g.10gb:\n  - devices: all\n    mig-enabled: true\n    mig-devices:\n      1g.10gb: 7\n"
    )
    find(resources, "NodeGroup", "dra-h100-on-demand")["inputs"]["labels"]["nvidia.com/mig.config"] = "all-1g.10gb"
    assert _groups(resources)["dra-h100-on-demand"].claimable == {"mig.nvidia.com": 56, "efa.networking.k8s.aws": 32}
    text = "\n".join(v.message for v in _dra_check(resources)["gpu-requests-advertised"].violations)
    assert "Deployment inference/llama-70b claim 4 gpu.nvidia.com devices but no node group they can run on offers " \
           "it to claims (through a DRA driver) (dra-h100-on-demand: 32 efa.networking.k8s.aws devices to claims, " \
           "56 mig.nvidia.com devices to claims per node)" in text
    for request in _template(resources, "llama-70b-devices")["devices"]["requests"]:
        request["exactly"]["deviceClassName"] = "mig.nvidia.com"
        request["exactly"].pop("selectors", None)
    text = "\n".join(v.message for v in _dra_check(resources)["gpu-requests-advertised"].violations)
    assert "Deployment inference/llama-70b" not in text


def test_every_release_of_the_efa_device_plugin_counts(tmp_path, capsys):
    """Each Helm release of aws-efa-k8s-device-plugin runs its own DaemonSet (templates/daemonset.yaml); a second
    release selecting the DRA pool hands out its EFA devices beside aws-dranet, whatever the first selects."""
    other = _efa_plugin({"supportedInstanceLabels": {"keys": ["inferstack.dev/pool"], "values": ["l40s-batch"]}})
    second = _efa_plugin({"supportedInstanceLabels": {"keys": ["inferstack.dev/pool"], "values": ["h100"]}})
    second["name"] = "dra-platform-efa-second"
    code, report = check(rendered("dra") + [other, second], tmp_path, capsys)
    assert code == 1 and failing(report) == {"gpu-requests-advertised"}
    assert "its EFA devices are handed out by both the EFA device plugin (release dra-platform-efa-second) and the " \
           "EFA DRA driver (release dra-platform-dra-efa)" in messages(report, "gpu-requests-advertised")


@pytest.mark.parametrize("edit", [
    pytest.param(lambda r: _pod_spec(r, "Deployment", "llama-70b")["containers"][0]["resources"].pop("claims"),
                 id="the container names no claim"),
    pytest.param(lambda r: _template(r, "llama-70b-devices").clear(), id="the template's spec.spec is empty"),
])
def test_a_vllm_container_that_sees_no_gpu_fails_the_layout(tmp_path, capsys, edit):
    """KEP-4381: a claim's devices reach only the containers naming it in resources.claims; a vLLM container with
    none sees 0 GPUs while tensor_parallel 4 needs 4 (vLLM 0.33 EngineArgs.create_engine_config)."""
    resources = rendered("dra")
    edit(resources)
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and "vllm-parallel-layout" in failing(report)
    assert "Deployment inference/llama-70b container 'vllm' requests 0 nvidia.com/gpu" in \
           messages(report, "vllm-parallel-layout")


def test_a_container_claim_request_the_template_lacks_fails(tmp_path, capsys):
    """KEP-4381 resources.claims[].request names one request of the claim; the kubelet's DRA manager finds no
    devices for a request the claim does not have, so the container gets none."""
    resources = rendered("dra")
    _pod_spec(resources, "Deployment", "llama-8b-fp8")["containers"][0]["resources"]["claims"] = [
        {"name": "rank-0", "request": "nope"}]
    code, report = check(resources, tmp_path, capsys)
    assert code == 1 and failing(report) == {"gpu-requests-advertised", "vllm-parallel-layout"}
    assert (
        "Deployment inference/llama-8b-fp8: container 'vllm' uses request 'nope' of claim 'rank-0', which "
        "ResourceClaimTemplate inference/llama-8b-fp8-devices does not define (its requests: 'gpu')"
        in messages(report, "gpu-requests-advertised")
    )
    assert "Deployment inference/llama-8b-fp8 container 'vllm' requests 0 nvidia.com/gpu" in \
           messages(report, "vllm-parallel-layout")


def test_a_workload_unknown_in_preview_is_skipped_and_the_rest_checked():
    """pulumi_policy policy.py turns an UnknownValueError into "can't run policy ... during preview"; a stack policy
    checks every other workload first, so one unknown output hides no violation elsewhere."""
    resources = rendered("dra")
    _pod_spec(resources, "Deployment", "llama-8b-fp8")["containers"][0]["args"] = UNKNOWN_STRING_VALUE
    _pod_spec(resources, "Deployment", "llama-70b")["containers"][0]["resources"]["claims"] = [{"name": "rank-0"}]
    lws = find(resources, "LeaderWorkerSet", "llama-70b-long-group")
    unknown = copy.deepcopy(lws)
    unknown["name"] = "dra-serving-unknown-lws"
    unknown["inputs"]["metadata"]["name"] = "unknown-group"
    unknown["inputs"]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["image"] = \
        UNKNOWN_STRING_VALUE
    for template in ("leaderTemplate", "workerTemplate"):
        lws["inputs"]["spec"]["leaderWorkerTemplate"][template]["spec"]["containers"][0]["image"] = \
            "vllm/vllm-openai:v0.33.0"
    results = _dra_check(resources + [unknown])
    layout, image = results["vllm-parallel-layout"], results["efa-capable-image"]
    assert [v.message.split(" but ")[0] for v in layout.violations] == [
        "Deployment inference/llama-70b container 'vllm' requests 1 nvidia.com/gpu through 1 claims of "
        "ResourceClaimTemplate inference/llama-70b-devices"]
    assert layout.notes[0].startswith("can't run policy 'vllm-parallel-layout' from policy pack 'inferstack' during "
                                      "preview: Deployment inference/llama-8b-fp8 was not checked (")
    assert {v.message.split(" requests ")[0] for v in image.violations} == {
        f"{LONG} container 'vllm' (leader)", f"{LONG} container 'vllm' (worker)"}
    assert "LeaderWorkerSet inference/unknown-group was not checked" in image.notes[0]


def test_a_shared_resource_claim_in_a_replicated_workload_fails():
    """kubernetes pkg/scheduler/framework/plugins/dynamicresources: an existing ResourceClaim is allocated once and
    every pod naming it reserves the same allocation, so two replicas land on one node and share its devices."""
    resources = rendered("dra")
    claim = copy.deepcopy(find(resources, "ResourceClaimTemplate", "llama-8b-fp8-devices"))
    claim.update(type="kubernetes:resource.k8s.io/v1:ResourceClaim", name="dra-shared-claim")
    claim["inputs"].update(kind="ResourceClaim", spec=claim["inputs"]["spec"]["spec"])
    claim["inputs"]["metadata"]["name"] = "shared-claim"
    deployment = find(resources, "Deployment", "llama-8b-fp8")
    assert deployment["inputs"]["spec"]["replicas"] > 1
    deployment["inputs"]["spec"]["template"]["spec"]["resourceClaims"] = [
        {"name": "rank-0", "resourceClaimName": "shared-claim"}]
    results = _dra_check(resources + [claim])
    assert [v.message for v in results["gpu-requests-advertised"].violations] == [
        "Deployment inference/llama-8b-fp8: claim 'rank-0' names the ResourceClaim inference/shared-claim, which is "
        "allocated once for every pod of the workload, so all its pods land on one node and share the same devices "
        "(kubernetes pkg/scheduler/framework/plugins/dynamicresources: pods reserve an allocated claim). To fix: use "
        "resourceClaimTemplateName so each pod gets its own claim."]
    seen: dict[str, Any] = {}

    def probe(args, report):
        found = next(w for w in workloads(args.resources) if w.workload.name == "llama-8b-fp8")
        seen.update(per_replica=found.device_requests_per_replica(), resolve=found.claims_resolve)

    run_policies(resources + [claim], "dra",
                 policies=[StackValidationPolicy(name="probe", description="probe", validate=probe)])
    assert seen == {"per_replica": {}, "resolve": False}


def test_device_plugin_pools_stay_unknown_without_the_gpu_operator():
    """Without a gpu-operator release nothing runs the device plugin the pack reads (NVIDIA/gpu-operator deploys it):
    a pool no DRA driver selects has unknown resources, not none; a DRA pool still offers its driver's devices."""
    resources = [r for r in rendered("dra") if r["name"] != "dra-platform-gpu-operator-release"]
    groups = _groups(resources)
    batch = groups["dra-l40s-batch-spot"]
    assert batch.advertised is None
    assert batch.problems == ["the stack installs no gpu-operator release, so its GPU resources are unknown"]
    assert groups["dra-h100-on-demand"].claimable == {"gpu.nvidia.com": 8, "efa.networking.k8s.aws": 32}


def test_claim_problems_are_reported_without_node_groups():
    """A claim of an uncountable request (kueue v0.19.2 pkg/dra/claims.go refuses allocationMode All) is wrong
    whatever nodes the stack has: it is reported even when the stack creates no node group."""
    resources = rendered("dra")
    _template(resources, "llama-8b-fp8-devices")["devices"]["requests"][0]["exactly"]["allocationMode"] = "All"
    stack = [find(resources, "Deployment", "llama-8b-fp8"), find(resources, "ResourceClaimTemplate", "llama-8b-fp8-devices")]
    result = {r.name: r for r in run_policies(stack, "dra")}["gpu-requests-advertised"]
    assert [v.message.split(": every")[0] for v in result.violations] == [
        "Deployment inference/llama-8b-fp8: claim 'rank-0': ResourceClaimTemplate inference/llama-8b-fp8-devices "
        "request 'gpu' takes allocationMode All"]
    assert result.notes == ["not applicable: the stack creates no node groups, so what nodes advertise is not known"]


def test_node_template_tags_state_what_device_plugins_advertise():
    """cluster-autoscaler-1.36.1 cloudprovider/aws/aws_manager.go buildNodeFromTemplate copies
    node-template/resources tags into the template node's capacity: a device plugin's resources are node capacity,
    a DRA driver's devices are not (they are ResourceSlices). Where the operator's plugin still runs on a DRA group,
    its nodes do advertise nvidia.com/gpu."""
    resources = rendered("dra")
    groups = _groups(resources)
    assert expected_tags(groups["dra-h100-on-demand"])[f"{RESOURCE_TAG}nvidia.com/gpu"] == "0"
    assert f"{RESOURCE_TAG}vpc.amazonaws.com/efa" not in expected_tags(groups["dra-h100-on-demand"])
    del find(resources, "NodeGroup", "dra-h100-on-demand")["inputs"]["labels"]["nvidia.com/gpu.deploy.device-plugin"]
    assert expected_tags(_groups(resources)["dra-h100-on-demand"])[f"{RESOURCE_TAG}nvidia.com/gpu"] == "8"


@pytest.mark.parametrize("seed", range(3))
def test_no_rule_crashes_on_odd_dra_resources(seed):
    """The DRA stack's claims, templates and driver releases broken in places (wrong types, unknowns) give
    verdicts or preview notes, never a traceback."""
    rng = random.Random(seed)
    broken = [{**r, "inputs": _as_inputs(_mutated(r["inputs"], rng))} for r in rendered("dra")]
    results = run_policies(broken, "dra", spec_policy_config(load_stack(STACKS, "dra")))
    assert [r.name for r in results] == [p.name for p in POLICIES]
