"""The DRA claims of stacks/dra.py, allocated the way the scheduler allocates them on a p5.48xlarge (issue 31).

`allocate` is an allocator written here, independent of components/, after the scheduler's structured-parameters
allocator (kubernetes staging/src/k8s.io/dynamic-resource-allocation/structured/internal/stable/
allocator_stable.go, Allocator.Allocate and allocateOne): all claims of one pod are allocated together on one node;
each request takes `count` devices that match its DeviceClass's selectors and its own; a device is allocated at
most once, across claims and across pods already on the node; a `matchAttribute` constraint
(matchAttributeConstraint) requires every device of the requests it names to carry the attribute with one value;
the search backtracks and the first full solution wins. Request forms Kueue refuses (firstAvailable, allocationMode
All, adminAccess) raise instead of being modelled.

Selectors are CEL, evaluated with cel-python over the device as the API documents it (resource.k8s.io/v1
CELDeviceSelector.expression: device.driver, device.attributes grouped by domain, an unknown domain an empty map,
any other result than a bool an error that aborts allocation), with the Kubernetes semver library's `semver()` and
`compareTo` (k8s.io/apiserver/pkg/cel/library/semverlib.go) for version attributes.

The node's devices follow components/catalog/dra.json pcie_layouts and the attributes the drivers publish: the
NVIDIA driver's type, productName, cudaComputeCapability (a version) and resource.kubernetes.io/pcieRoot
(k8s-dra-driver-gpu v0.4.0 cmd/gpu-kubelet-plugin/deviceinfo.go), dranet's pciDevice and pcieRoot (kubernetes-sigs/
dranet pkg/inventory/db.go). The GPU DeviceClass is the NVIDIA chart's (tests/data/dra), the EFA one the stack's.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import celpy
import pytest
from celpy import celtypes
from celpy.evaluation import CELEvalError
from test_dra_charts import GPU_DRIVER_CHART, STACKS, objects_of, rendered_device_class

from inferstack.catalog.dra import DEVICE_CLASSES, PCIE_ROOT_ATTRIBUTE, pcie_layout
from inferstack.planning.device_claims import pod_claims
from inferstack.spec import GpuSelector, SpecError, StackSpec
from inferstack.spec.pools import PoolHardware
from inferstack.stacks import load_stack
from inferstack.validation import validate

H100_PRODUCT = "NVIDIA H100 80GB HBM3"  # NVML's name of the p5.48xlarge GPU, as the driver publishes it
H100_COMPUTE_CAPABILITY = "9.0.0"
EFA_PRODUCT = "Elastic Fabric Adapter (EFA)"
NODE = "p5-node"

DeviceId = tuple[str, str, str]  # driver, pool, device: structured.DeviceID


@functools.total_ordering
class Semver:
    """A version attribute or semver() value: major.minor.patch, compared numerically."""

    def __init__(self, text: Any) -> None:
        match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", str(text))
        if match is None:
            raise ValueError(f"not a semantic version: {text!r}")
        self.parts = tuple(int(part) for part in match.groups())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self.parts == other.parts

    def __lt__(self, other: Semver) -> bool:
        return self.parts < other.parts

    def __hash__(self) -> int:
        return hash(self.parts)


def _compare_to(left: Semver, right: Semver) -> celtypes.IntType:
    return celtypes.IntType((left.parts > right.parts) - (left.parts < right.parts))


SEMVER_LIBRARY = {"semver": Semver, "compareTo": _compare_to}


class _Domains(celtypes.MapType):
    """device.attributes: looking up a domain the device has no attribute in gives an empty map."""

    def __getitem__(self, key):
        return super().get(key, celtypes.MapType())


@dataclass(frozen=True)
class Device:
    driver: str
    pool: str
    name: str
    attributes: Mapping[str, str | Semver]  # fully qualified attribute name -> value

    @property
    def id(self) -> DeviceId:
        return self.driver, self.pool, self.name

    def cel(self) -> celtypes.MapType:
        domains: dict[str, dict[str, Any]] = {}
        for qualified, value in self.attributes.items():
            domain, _, name = qualified.rpartition("/")
            domains.setdefault(domain, {})[name] = value
        attributes = {
            celtypes.StringType(domain): celtypes.MapType({
                celtypes.StringType(name): value if isinstance(value, Semver) else celtypes.StringType(value)
                for name, value in values.items()
            })
            for domain, values in domains.items()
        }
        return celtypes.MapType({
            celtypes.StringType("driver"): celtypes.StringType(self.driver),
            celtypes.StringType("attributes"): _Domains(attributes),
            celtypes.StringType("capacity"): _Domains(),
        })


def p5_node(instance_type: str = "p5.48xlarge", mig_slices: tuple[str, int] | None = None) -> list[Device]:
    """One node's ResourceSlice devices from the catalog's PCIe layout: per root its GPUs (NVIDIA driver), or with
    `mig_slices` (profile, count) each GPU's MIG devices of type 'mig' with its root (mig.go), and its EFA devices
    (dranet), plus the node's ENA interface, which dranet's default filter leaves out of a real slice and which here
    shows the EFA class's own selector leaves it out too."""
    layout = pcie_layout(instance_type)
    assert layout is not None, f"no PCIe layout of {instance_type} in components/catalog/dra.json"
    gpu_driver, efa_driver = DEVICE_CLASSES["gpu"].driver, DEVICE_CLASSES["efa"].driver
    devices = []
    for root in range(layout.roots):
        pcie_root = f"pci0000:{0x10 * (root + 1):02x}"
        for index in range(layout.gpus_per_root):
            gpu = f"gpu-{root * layout.gpus_per_root + index}"
            attributes = {
                f"{gpu_driver}/type": "gpu",
                f"{gpu_driver}/productName": H100_PRODUCT,
                f"{gpu_driver}/cudaComputeCapability": Semver(H100_COMPUTE_CAPABILITY),
                PCIE_ROOT_ATTRIBUTE: pcie_root,
            }
            if mig_slices is None:
                devices.append(Device(gpu_driver, NODE, gpu, attributes))
                continue
            profile, count = mig_slices
            devices += [Device(gpu_driver, NODE, f"{gpu}-mig-{profile}-{slot}", {
                **attributes, f"{gpu_driver}/type": "mig", f"{gpu_driver}/profile": profile,
            }) for slot in range(count)]
        for index in range(layout.efa_per_root):
            devices.append(Device(efa_driver, NODE, f"efa-{root * layout.efa_per_root + index}", {
                f"{efa_driver}/pciDevice": EFA_PRODUCT,
                PCIE_ROOT_ATTRIBUTE: pcie_root,
            }))
    devices.append(Device(efa_driver, NODE, "ena-0", {
        f"{efa_driver}/pciDevice": "Elastic Network Adapter (ENA)", PCIE_ROOT_ATTRIBUTE: "pci0000:10",
    }))
    return devices


@functools.cache
def _program(expression: str) -> celpy.Runner:
    environment = celpy.Environment()
    return environment.program(environment.compile(expression), functions=SEMVER_LIBRARY)


def selector_matches(expression: str, device: Device) -> bool:
    """A CEL selector on one device; anything but a bool (an evaluation error included) aborts, as upstream."""
    result = _program(expression).evaluate({"device": device.cel()})
    if isinstance(result, CELEvalError) or not isinstance(result, (bool, celtypes.BoolType)):
        raise AssertionError(f"selector {expression!r} on {device.name}: {result!r}, not a bool")
    return bool(result)


@functools.cache
def device_classes() -> dict[str, list[str]]:
    """DeviceClass name -> its CEL selectors: the NVIDIA chart's GPU and MIG classes and the stack's EFA class."""
    classes = [rendered_device_class(GPU_DRIVER_CHART, f"templates/deviceclass-{kind}.yaml") for kind in ("gpu", "mig")]
    classes += objects_of("DeviceClass")
    return {c["metadata"]["name"]: [s["cel"]["expression"] for s in c["spec"]["selectors"]] for c in classes}


@dataclass(frozen=True)
class Slot:
    """One device to pick: the `index`th of request `request` of claim `claim`."""

    claim: str
    request: str
    index: int


def _requests(claim: str, spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for request in spec["devices"]["requests"]:
        if "exactly" not in request or "firstAvailable" in request:
            raise NotImplementedError(f"{claim}/{request['name']}: only `exactly` requests are modelled")
        exactly = request["exactly"]
        if exactly.get("allocationMode", "ExactCount") != "ExactCount" or exactly.get("adminAccess"):
            raise NotImplementedError(f"{claim}/{request['name']}: only ExactCount without adminAccess is modelled")
        yield request["name"], exactly


def allocate(
    claims: Mapping[str, Mapping[str, Any]], devices: Sequence[Device], allocated: frozenset[DeviceId] = frozenset(),
) -> dict[str, dict[str, list[Device]]] | None:
    """All of a pod's claims (name -> ResourceClaimSpec) on one node's devices, none of `allocated` reused:
    claim -> request -> devices, or None when no allocation exists."""
    classes = device_classes()
    slots: list[Slot] = []
    matching: dict[tuple[str, str], list[Device]] = {}
    constraints: dict[str, list[tuple[frozenset[str], str]]] = {}
    for claim, spec in claims.items():
        names = []
        for name, exactly in _requests(claim, spec):
            names.append(name)
            if exactly["deviceClassName"] not in classes:
                raise LookupError(f"{claim}/{name}: DeviceClass {exactly['deviceClassName']!r} does not exist")
            selectors = classes[exactly["deviceClassName"]] + [s["cel"]["expression"] for s in
                                                                 exactly.get("selectors", ())]
            matching[claim, name] = [d for d in devices if d.id not in allocated
                                     and all(selector_matches(s, d) for s in selectors)]
            slots += [Slot(claim, name, index) for index in range(exactly["count"])]
        for constraint in spec["devices"].get("constraints", ()):
            if set(constraint) != {"requests", "matchAttribute"}:
                raise NotImplementedError(f"{claim}: only matchAttribute constraints are modelled: {constraint}")
            constraints.setdefault(claim, []).append(
                (frozenset(constraint["requests"] or names), constraint["matchAttribute"]))

    chosen: list[Device] = []

    def fits(slot: Slot, device: Device) -> bool:
        """Unused so far, after the previous pick of its request (picks within a request are unordered), and
        meeting every constraint of its claim that names its request."""
        if device in chosen:
            return False
        previous = [d for s, d in zip(slots, chosen) if (s.claim, s.request) == (slot.claim, slot.request)]
        candidates = matching[slot.claim, slot.request]
        if previous and candidates.index(device) < candidates.index(previous[-1]):
            return False
        for requests, attribute in constraints.get(slot.claim, ()):
            if slot.request not in requests:
                continue
            if attribute not in device.attributes:
                return False
            fixed = [d.attributes[attribute] for s, d in zip(slots, chosen) if s.claim == slot.claim
                     and s.request in requests]
            if fixed and fixed[0] != device.attributes[attribute]:
                return False
        return True

    def search(position: int) -> bool:
        if position == len(slots):
            return True
        slot = slots[position]
        for device in matching[slot.claim, slot.request]:
            if fits(slot, device):
                chosen.append(device)
                if search(position + 1):
                    return True
                chosen.pop()
        return False

    if not search(0):
        return None
    result: dict[str, dict[str, list[Device]]] = {}
    for slot, device in zip(slots, chosen):
        result.setdefault(slot.claim, {}).setdefault(slot.request, []).append(device)
    return result


def used(allocation: Mapping[str, Mapping[str, list[Device]]]) -> frozenset[DeviceId]:
    return frozenset(d.id for requests in allocation.values() for picked in requests.values() for d in picked)


def templates() -> dict[str, dict[str, Any]]:
    """Rendered ResourceClaimTemplate name -> its ResourceClaimSpec."""
    return {t["metadata"]["name"]: t["spec"]["spec"] for t in objects_of("ResourceClaimTemplate")}


def pod_specs(owner: str) -> list[dict[str, Any]]:
    """The pod templates of a rendered Deployment or LeaderWorkerSet (leader and workers)."""
    for obj in objects_of("Deployment") + objects_of("LeaderWorkerSet"):
        if obj["metadata"]["name"] == owner:
            spec = obj["spec"]
            if "leaderWorkerTemplate" in spec:
                group = spec["leaderWorkerTemplate"]
                return [group["leaderTemplate"]["spec"], group["workerTemplate"]["spec"]]
            return [spec["template"]["spec"]]
    raise AssertionError(f"stacks/dra.py renders no Deployment or LeaderWorkerSet {owner}")


def pod_claims_of(pod: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The claims one pod gets: one ResourceClaim per resourceClaims entry, from its template."""
    specs = templates()
    return {entry["name"]: specs[entry["resourceClaimTemplateName"]] for entry in pod["resourceClaims"]}


def h100_pods() -> dict[str, list[dict[str, Any]]]:
    """Owner -> pod specs of every workload the stack places on the h100 pool."""
    spec = load_stack(STACKS, "dra")
    return {
        name: pod_specs(name)
        for name in ([f"{m.name}-group" if m.pipeline_parallel > 1 else m.name for m in spec.models
                      if m.pool == "h100"])
    }


def test_every_h100_pod_claims_through_its_template_and_its_containers_use_every_claim():
    """A claim no container lists is allocated but never handed to vLLM (core/v1 ResourceRequirements.claims)."""
    pods = h100_pods()
    assert set(pods) == {"llama-70b-long-group", "llama-70b"}
    for owner, specs in pods.items():
        for pod in specs:
            claimed = {entry["name"] for entry in pod["resourceClaims"]}
            listed = {c["name"] for container in pod["containers"] for c in container["resources"].get("claims", ())}
            assert claimed and listed == claimed, owner
            assert not any("nvidia.com/gpu" in (c["resources"].get("limits") or {}) for c in pod["containers"]), owner


@pytest.mark.parametrize("pod_index", [0, 1], ids=["leader", "worker"])
def test_each_rank_of_the_two_node_70b_gets_one_gpu_and_the_four_efa_devices_of_its_root(pod_index):
    """llama-70b-long: tensor_parallel 8 per pod, 8 claims of 1 GPU + 4 EFA paired by resource.kubernetes.io/pcieRoot;
    one pod fills a p5.48xlarge and every root's devices go to one rank."""
    pod = pod_specs("llama-70b-long-group")[pod_index]
    claims = pod_claims_of(pod)
    assert len(claims) == 8
    allocation = allocate(claims, p5_node())
    assert allocation is not None
    roots = []
    for claim, picked in allocation.items():
        assert [len(picked["gpu"]), len(picked["efa"])] == [1, 4], claim
        root = picked["gpu"][0].attributes[PCIE_ROOT_ATTRIBUTE]
        assert {d.attributes[PCIE_ROOT_ATTRIBUTE] for d in picked["efa"]} == {root}, claim
        assert all(d.attributes[f"{DEVICE_CLASSES['efa'].driver}/pciDevice"] == EFA_PRODUCT for d in picked["efa"])
        roots.append(root)
    assert len(set(roots)) == 8
    assert len(used(allocation)) == 8 + 32


def test_two_four_gpu_70b_pods_share_a_node_and_a_third_does_not_fit():
    """llama-70b: 4 claims of 1 GPU each, no EFA (tensor_parallel 4 over NVLink): two pods use the 8 GPUs."""
    (pod,) = pod_specs("llama-70b")
    claims = pod_claims_of(pod)
    assert len(claims) == 4 and all("efa" not in {r["name"] for r in c["devices"]["requests"]} for c in claims.values())
    node, taken = p5_node(), frozenset()
    for _ in range(2):
        allocation = allocate(claims, node, taken)
        assert allocation is not None
        assert all(list(picked) == ["gpu"] and len(picked["gpu"]) == 1 for picked in allocation.values())
        taken |= used(allocation)
    assert len(taken) == 8
    assert allocate(claims, node, taken) is None


@pytest.mark.parametrize("owner", ["llama-70b-long-group", "llama-70b", "llama-8b-fp8"])
def test_nothing_else_fits_beside_a_two_node_70b_pod(owner):
    """Once a llama-70b-long pod holds a node's 8 GPUs and 32 EFA devices, no other pod's claims can be met there
    (not even llama-8b-fp8's, whose compute capability selector an H100 would meet)."""
    node = p5_node()
    other = pod_claims_of(pod_specs(owner)[-1])
    assert allocate(other, node) is not None  # it fits on a node of its own
    first = allocate(pod_claims_of(pod_specs("llama-70b-long-group")[0]), node)
    assert first is not None
    assert allocate(other, node, used(first)) is None


def test_a_claim_for_five_efa_devices_per_gpu_cannot_be_met():
    """Each root holds 4 EFA devices: a fifth on the GPU's root does not exist, and the constraint forbids another's."""
    spec = templates()["llama-70b-long-devices"]
    greedy = {"devices": {**spec["devices"], "requests": [
        {**r, "exactly": {**r["exactly"], "count": 5}} if r["name"] == "efa" else r for r in spec["devices"]["requests"]
    ]}}
    assert allocate({"rank-0": greedy}, p5_node()) is None
    assert allocate({"rank-0": spec}, p5_node()) is not None


def test_the_pcie_root_constraint_is_what_pairs_gpus_with_their_efa_devices():
    """With the GPUs of roots 2-8 and one EFA device of root 1 taken, the paired claim has no root left; the same
    requests without the constraint are met by mixing roots, which is what the device plugin would hand out."""
    spec = templates()["llama-70b-long-devices"]
    node = p5_node()
    root_one = node[0].attributes[PCIE_ROOT_ATTRIBUTE]
    gpus = [d for d in node if d.name.startswith("gpu-")]
    efa_on_root_one = [d for d in node if d.name.startswith("efa-") and d.attributes[PCIE_ROOT_ATTRIBUTE] == root_one]
    taken = frozenset(d.id for d in gpus[1:]) | {efa_on_root_one[0].id}
    assert allocate({"rank-0": spec}, node, taken) is None
    unpaired = {"devices": {"requests": spec["devices"]["requests"]}}
    allocation = allocate({"rank-0": unpaired}, node, taken)
    assert allocation is not None
    assert len({d.attributes[PCIE_ROOT_ATTRIBUTE] for d in allocation["rank-0"]["efa"]}) == 2


def test_a_paired_claim_skips_roots_without_enough_free_efa_devices():
    """With one EFA device taken on each of roots 1-7, the search backtracks to root 8, the only whole one."""
    spec = templates()["llama-70b-long-devices"]
    node = p5_node()
    efa = [d for d in node if d.name.startswith("efa-")]
    taken = frozenset(efa[root * 4].id for root in range(7))
    allocation = allocate({"rank-0": spec}, node, taken)
    assert allocation is not None
    last_root = efa[-1].attributes[PCIE_ROOT_ATTRIBUTE]
    assert {d.attributes[PCIE_ROOT_ATTRIBUTE] for d in allocation["rank-0"]["gpu"] + allocation["rank-0"]["efa"]} == {
        last_root}


def test_the_efa_class_selects_no_gpu_and_no_ena_interface():
    """The class selectors alone: gpu.nvidia.com takes the 8 GPUs, efa.networking.k8s.aws the 32 EFA devices."""
    node = p5_node()
    classes = device_classes()
    selected = {name: [d.name for d in node if all(selector_matches(s, d) for s in selectors)]
                for name, selectors in classes.items()}
    assert len(selected[DEVICE_CLASSES["gpu"].name]) == 8 and selected[DEVICE_CLASSES["mig"].name] == []
    efa = selected[DEVICE_CLASSES["efa"].name]
    assert len(efa) == 32 and "ena-0" not in efa


def dra_stack_document() -> dict[str, Any]:
    return load_stack(STACKS, "dra").model_dump(mode="json", exclude_none=True)


def h100_with(**fields: Any) -> StackSpec:
    """stacks/dra.py with the h100 pool (node_pools[0]) changed."""
    document = dra_stack_document()
    assert document["node_pools"][0]["name"] == "h100"
    document["node_pools"][0].update(fields)
    return StackSpec.model_validate(document)


def emitted_claim(spec: StackSpec, model_name: str) -> dict[str, Any]:
    """The ResourceClaimSpec the stack would emit for one service's pods on its pool (serving/claims.py)."""
    model = next(m for m in spec.models if m.name == model_name)
    pool = next(p for p in spec.node_pools if p.name == model.pool)
    return pod_claims(model, PoolHardware(pool)).claim.claim_spec()


def refusal_paths(spec: StackSpec) -> list[str]:
    with pytest.raises(SpecError) as caught:
        validate(spec)
    return [refusal.path for refusal in caught.value.refusals]


@pytest.mark.parametrize(("selector", "path"), [
    ({"min_compute_capability": "10.0"}, "node_pools[0].gpu_selector.min_compute_capability"),
    ({"product": "NVIDIA A100-SXM4-80GB"}, "node_pools[0].gpu_selector.product"),
])
def test_a_gpu_selector_no_h100_meets_is_refused_at_its_field_and_unallocatable(selector, path):
    """The spec-time refusal (platform/dra_refusals.py) agrees with the allocator: no GPU of the node matches the
    selector the claim would carry (productName equality, cudaComputeCapability.compareTo(semver(...)) >= 0)."""
    spec = h100_with(gpu_selector=selector)
    assert refusal_paths(spec) == [path]
    claim = emitted_claim(spec, "llama-70b")
    assert claim["devices"]["requests"][0]["exactly"]["selectors"]
    assert allocate({"rank-0": claim}, p5_node()) is None


@pytest.mark.parametrize("selector", [
    GpuSelector(min_compute_capability="9.0"), GpuSelector(product=H100_PRODUCT),
    GpuSelector(product=H100_PRODUCT, min_compute_capability="8.0"),
])
def test_a_gpu_selector_the_h100_meets_is_accepted_and_allocatable(selector):
    """The nearest accepted selectors: capability equal to the H100's (compareTo 0) and its exact product name."""
    spec = h100_with(gpu_selector=selector.model_dump(exclude_none=True))
    validate(spec)
    for model_name in ("llama-70b-long", "llama-70b"):
        claim = emitted_claim(spec, model_name)
        assert len(claim["devices"]["requests"][0]["exactly"]["selectors"]) == len(
            selector.model_dump(exclude_none=True))
        allocation = allocate({"rank-0": claim}, p5_node())
        assert allocation is not None and len(allocation["rank-0"]["gpu"]) == 1


def test_efa_under_dra_on_an_instance_type_without_a_recorded_pcie_layout_is_refused():
    """p4d.24xlarge has no layout in components/catalog/dra.json, so no node's devices can be built to pair with:
    the pool is refused at its instance type."""
    assert pcie_layout("p4d.24xlarge") is None
    spec = h100_with(instance_types=["p4d.24xlarge"])
    assert refusal_paths(spec) == ["node_pools[0].instance_types[0]"]


def test_a_mig_claim_takes_one_slice_of_its_profile():
    """A static-MIG DRA pool: the claim names mig.nvidia.com with a profile selector (attribute 'profile', mig.go);
    a p5.48xlarge split into 2 x 3g.40gb per GPU holds 16 such pods, and no slice of another profile matches."""
    document = dra_stack_document()
    document["node_pools"][0].update(gpu_sharing={"mode": "mig", "strategy": "single", "layout": {"3g.40gb": 2}},
                                     efa=False)
    document["models"] = [m for m in document["models"] if m["pool"] != "h100"] + [
        {"name": "embed", "model": "BAAI/bge-large-en-v1.5", "pool": "h100", "mig_profile": "3g.40gb",
         "max_model_len": 512, "tier": "standard"}]
    document["gateway"]["auth"]["tenants"][0]["models"] = [m["name"] for m in document["models"]]
    spec = StackSpec.model_validate(document)
    validate(spec)
    claim = emitted_claim(spec, "embed")
    assert claim["devices"]["requests"][0]["exactly"]["deviceClassName"] == DEVICE_CLASSES["mig"].name
    node, taken = p5_node(mig_slices=("3g.40gb", 2)), frozenset()
    for _ in range(16):
        allocation = allocate({"rank-0": claim}, node, taken)
        assert allocation is not None
        taken |= used(allocation)
    assert allocate({"rank-0": claim}, node, taken) is None
    assert allocate({"rank-0": claim}, p5_node(mig_slices=("1g.10gb", 7))) is None
    assert allocate({"rank-0": claim}, p5_node()) is None  # whole GPUs are not of the MIG class
