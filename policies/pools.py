"""What each node group offers the scheduler, recovered from the resources the program registered.

A node group is an EKS managed node group, or under Karpenter a NodePool with its EC2NodeClass: the same
view answers both (its labels, capacity type, instance types, node limit and EFA devices), so every rule
reads Karpenter pools exactly as it reads node groups.

A node group's labels name its pool and the MIG / device-plugin config its nodes select; the GPU
operator release (or a ConfigMap it names) holds those configs; the launch template holds the EFA
interfaces; the catalog knows GPUs per instance type. Joined, they give the extended resources
one node advertises. The spec derives the same facts (`PoolHardware`), but the rules read them
from what was registered, so a layer that drifts from the spec is caught here.

Devices reach pods through a mechanism that runs on the node: the GPU operator's device plugin (kept off a node
whose labels set nvidia.com/gpu.deploy.device-plugin=false), the EFA device plugin, or the DRA drivers (NVIDIA's
dra-driver-nvidia-gpu, AWS's aws-dranet) on the nodes their releases' node affinity selects. What a group offers
is what the mechanisms selecting it offer, kept per kind: a device plugin's extended resources (what a container's
limits can take) and a DRA driver's devices by DeviceClass (what a claim can take); a pod asking one way is not met
by devices offered the other way. The capacity rules count both as extended resources (policies/claims.py). Two
mechanisms handing out the same devices of one node is a problem of the group.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml
from pulumi_policy import PolicyResource

from inferstack import conventions
from inferstack.catalog import InstanceType, UnknownInstanceType, instance_type
from inferstack.catalog.dra import DEVICE_CLASSES, DEVICE_PLUGIN_DEPLOY_LABEL
from inferstack.policies.claims import CLASS_RESOURCES, ClaimIndex
from inferstack.policies.props import dig, items, mapping, string_map, text, whole
from inferstack.policies.workloads import PodTemplate, Workload, expression_matches, kind_of, workload
from inferstack.spec.pools import EFA_RESOURCE, WHOLE_GPU

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
KARPENTER_NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
KARPENTER_NODE_CLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"
KARPENTER_NODE_POOL_LABEL = "karpenter.sh/nodepool"
# Karpenter's capacity types as EKS names them on node groups (shared/reference/karpenter.md 4.1).
KARPENTER_CAPACITY_TYPES = {"spot": "SPOT", "on-demand": "ON_DEMAND", "reserved": "CAPACITY_RESERVED"}
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
ASG_TAG = "aws:autoscaling/tag:Tag"  # one tag on the Auto Scaling group EKS made for a node group
HELM_RELEASE_TYPES = ("kubernetes:helm.sh/v3:Release", "kubernetes:helm.sh/v4:Chart")
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
EFA_INTERFACE_TYPES = ("efa", "efa-only")
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
EKS_NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"
GPU_DRA_CHART = "dra-driver-nvidia-gpu"
EFA_DRA_CHART = "aws-dranet"
EFA_PLUGIN_CHART = "aws-efa-k8s-device-plugin"
MIG_CONFIG_KEY = "config.yaml"  # the key mig-manager reads from its ConfigMap
DEFAULT_MIG_STRATEGY = "single"  # the gpu-operator chart's default
GPU_CLASS = DEVICE_CLASSES["gpu"].name
MIG_CLASS = DEVICE_CLASSES["mig"].name
EFA_CLASS = DEVICE_CLASSES["efa"].name
DEVICE_PLUGIN, DRA_DRIVER = "device plugin", "DRA driver"  # Mechanism.kind
KEDA_SCALED_OBJECT = "kubernetes:keda.sh/v1alpha1:ScaledObject"
HPA_KIND = "HorizontalPodAutoscaler"


def chart_name(props: Mapping[str, Any]) -> str:
    """'oci://registry/charts/gpu-operator' or 'nvidia/gpu-operator' -> 'gpu-operator'."""
    return text(props.get("chart")).rstrip("/").rsplit("/", 1)[-1]


def helm_releases(resources: Iterable[PolicyResource]) -> list[PolicyResource]:
    return [r for r in resources if r.resource_type in HELM_RELEASE_TYPES]


def _parse_document(value: Any) -> Mapping[str, Any] | None:
    """A config given inline (a mapping) or as YAML text; None when it is neither."""
    if isinstance(value, Mapping):
        return value
    if isinstance(value, str):
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            return None
        return parsed if isinstance(parsed, Mapping) else None
    return None


def _config_map_data(resources: Sequence[PolicyResource], name: str) -> Mapping[str, Any]:
    for resource in resources:
        if resource.resource_type == CONFIG_MAP and text(dig(resource.props, "metadata", "name")) == name:
            return mapping(resource.props.get("data"))
    return {}


@dataclass(frozen=True)
class OperatorConfig:
    """The GPU operator's MIG and device-plugin sharing configuration, as its release sets it."""

    release: str
    mig_strategy: str
    mig_configs: Mapping[str, Any] | None       # name -> mig-parted entries; None = the operator's built-in set
    plugin_configs: Mapping[str, Mapping[str, Any]]  # device-plugin config key -> config
    plugin_default: str | None
    plugin_enabled: bool = True                      # values.devicePlugin.enabled (the chart's default true)

    def mig_entries(self, name: str, instance: InstanceType) -> Sequence[Any] | None:
        if self.mig_configs is not None:
            entries = self.mig_configs.get(name)
            return items(entries) if entries is not None else None
        if name == "all-disabled":
            return [{"devices": "all", "mig-enabled": False}]
        profile = instance.gpu.mig_profile(name.removeprefix("all-")) if name.startswith("all-") else None
        if profile is None:
            return None
        return [{"devices": "all", "mig-enabled": True, "mig-devices": {profile.name: profile.max_count}}]


def gpu_operator(resources: Sequence[PolicyResource]) -> OperatorConfig | None:
    """The gpu-operator release's config, or None when the stack does not install the operator."""
    release = next((r for r in helm_releases(resources) if chart_name(r.props) == "gpu-operator"), None)
    if release is None:
        return None
    values = mapping(release.props.get("values"))
    mig = mapping(dig(values, "migManager", "config"))
    mig_data = mapping(mig.get("data")) or _config_map_data(resources, text(mig.get("name")))
    mig_document = _parse_document(mig_data.get(MIG_CONFIG_KEY)) if mig_data else None
    plugin = mapping(dig(values, "devicePlugin", "config"))
    plugin_data = mapping(plugin.get("data")) or _config_map_data(resources, text(plugin.get("name")))
    plugin_configs = {}
    for key, raw in plugin_data.items():
        parsed = _parse_document(raw)
        if parsed is not None:
            plugin_configs[key] = parsed
    return OperatorConfig(
        release=release.name,
        mig_strategy=text(dig(values, "mig", "strategy")) or DEFAULT_MIG_STRATEGY,
        mig_configs=mapping(mig_document.get("mig-configs")) if mig_document is not None else None,
        plugin_configs=plugin_configs,
        plugin_default=text(plugin.get("default")) or None,
        plugin_enabled=dig(values, "devicePlugin", "enabled") is not False,
    )


@dataclass(frozen=True)
class Mechanism:
    """What hands a node's devices to pods: a device plugin (extended resources) or a DRA driver (ResourceSlices)."""

    kind: str       # DEVICE_PLUGIN | DRA_DRIVER
    label: str      # "the EFA DRA driver (release dra-platform-dra-efa)"

    def __str__(self) -> str:
        return self.label


@dataclass
class NodeGroupView:
    """One managed node group: where it sits (labels), how its nodes are bought, what one node offers."""

    resource: PolicyResource
    labels: dict[str, str]
    capacity_type: str
    instance_types: tuple[str, ...]
    min_size: int
    max_size: int
    desired_size: int     # the size it is created at
    launch_template: PolicyResource | None
    asg_tags: dict[str, str] = field(default_factory=dict)  # tags set on its Auto Scaling group
    advertised: dict[str, int] | None = None  # every mechanism's devices as extended resources; None: unknown
    plugin_resources: dict[str, int] = field(default_factory=dict)  # extended resources device plugins advertise
    claimable: dict[str, int] = field(default_factory=dict)  # DeviceClass -> devices DRA drivers publish per node
    problems: list[str] = field(default_factory=list)
    node_class: PolicyResource | None = None  # a Karpenter NodePool's EC2NodeClass; None for a node group
    mechanisms: dict[str, list[Mechanism]] = field(default_factory=dict)  # "GPUs" / "EFA devices" -> who hands them out

    @property
    def is_karpenter(self) -> bool:
        return self.resource.resource_type == KARPENTER_NODE_POOL

    @property
    def baseline_nodes(self) -> int:
        """Nodes it holds for a minimum of replicas: a node group's size at creation (its minimum, or a Capacity
        Block group's block size: its minimum is 0 so EKS can empty it before the block ends); a Karpenter NodePool
        keeps none running but launches up to its node limit as soon as pods need them."""
        return self.max_size if self.is_karpenter else self.desired_size

    @property
    def efa_devices(self) -> int:
        if self.node_class is not None:
            return node_class_efa_interfaces(self.node_class)
        return efa_interfaces(self.launch_template)

    @property
    def name(self) -> str:
        return self.resource.name

    @property
    def pool(self) -> str | None:
        return self.labels.get(conventions.POOL_LABEL)

    @property
    def is_spot(self) -> bool:
        return self.capacity_type == "SPOT"

    @property
    def instance(self) -> InstanceType | None:
        """The catalog entry of the first instance type (the one prices and sizing are quoted for)."""
        if not self.instance_types:
            return None
        try:
            return instance_type(self.instance_types[0])
        except UnknownInstanceType:
            return None

    def offers(self, resource_name: str) -> int:
        return (self.advertised or {}).get(resource_name, 0)

    def offers_to_limits(self, resource_name: str) -> int:
        return self.plugin_resources.get(resource_name, 0)

    def offers_to_claims(self, device_class: str) -> int:
        return self.claimable.get(device_class, 0)

    def node_labels(self, instance: str | None) -> dict[str, str]:
        """Labels its nodes carry: the group's own, plus what EKS (or Karpenter) and the kubelet add."""
        if self.is_karpenter:
            capacity = {v: k for k, v in KARPENTER_CAPACITY_TYPES.items()}[self.capacity_type]
            labels = {**self.labels, conventions.KARPENTER_CAPACITY_LABEL: capacity,
                      KARPENTER_NODE_POOL_LABEL: text(dig(self.resource.props, "metadata", "name"))}
            if instance:
                labels[INSTANCE_TYPE_LABEL] = instance
            return labels
        labels = {**self.labels, conventions.EKS_CAPACITY_LABEL: self.capacity_type}
        group_name = text(self.resource.props.get("nodeGroupName"))
        if group_name:
            labels[EKS_NODEGROUP_LABEL] = group_name
        if instance:
            labels[INSTANCE_TYPE_LABEL] = instance
        return labels

    def carries(self, wanted: Mapping[str, str], terms: Sequence[Sequence[Mapping[str, Any]]] = ()) -> bool:
        """Whether nodes of some instance type of the group have these labels and satisfy one of the terms."""
        for instance in self.instance_types or (None,):
            labels = self.node_labels(instance)
            if any(labels.get(k) != v for k, v in wanted.items()):
                continue
            if not terms or any(all(expression_matches(e, labels) for e in term) for term in terms):
                return True
        return False

    def can_run(self, template: PodTemplate) -> bool:
        """Whether the template's nodeSelector and required node affinity accept this group's nodes."""
        return self.carries(template.node_selector(), template.required_node_terms())

    def node_capacity(self, resource_name: str) -> float | None:
        """What one node offers of a resource: device resources as advertised, cpu and memory from the
        catalog (the largest instance type of the group); None when it cannot be known."""
        if resource_name in ("cpu", "memory"):
            try:
                types = [instance_type(name) for name in self.instance_types]
            except UnknownInstanceType:
                return None
            if not types:
                return None
            if resource_name == "cpu":
                return float(max(t.vcpus for t in types))
            return float(max(t.memory_mib for t in types) * 2**20)
        if self.advertised is None:
            return None
        return float(self.offers(resource_name))

    def __str__(self) -> str:
        pool = f"pool {self.pool}, " if self.pool else ""
        if self.is_karpenter:
            return f"{self.name} ({pool}Karpenter {self.capacity_type}, up to {self.max_size} nodes)"
        return f"{self.name} ({pool}{self.capacity_type}, {self.min_size}-{self.max_size} nodes)"


def _linked(resource: PolicyResource, candidates: Sequence[PolicyResource], ref: Mapping[str, Any]) -> PolicyResource | None:
    """The candidate this resource depends on, else the one whose id/name the reference carries."""
    for dependency in resource.dependencies:
        if dependency in candidates:
            return dependency
    wanted = {text(ref.get("id")), text(ref.get("name"))} - {""}
    for candidate in candidates:
        if {text(candidate.props.get("id")), text(candidate.props.get("name"))} & wanted:
            return candidate
    return None


def efa_interfaces(launch_template: PolicyResource | None) -> int:
    if launch_template is None:
        return 0
    return sum(
        1
        for interface in items(launch_template.props.get("networkInterfaces"))
        if text(mapping(interface).get("interfaceType")) in EFA_INTERFACE_TYPES
    )


def node_class_efa_interfaces(node_class: PolicyResource) -> int:
    """EFA devices a Karpenter EC2NodeClass attaches (its `networkInterfaces`, section 4.5 of karpenter.md)."""
    return sum(
        1 for interface in items(dig(node_class.props, "spec", "networkInterfaces"))
        if text(mapping(interface).get("interfaceType")) in EFA_INTERFACE_TYPES
    )


def node_groups(resources: Sequence[PolicyResource]) -> list[NodeGroupView]:
    """Every managed node group of the stack with what one of its nodes advertises."""
    templates = [r for r in resources if r.resource_type == LAUNCH_TEMPLATE]
    asg_tags = [r for r in resources if r.resource_type == ASG_TAG]
    mechanisms = device_mechanisms(resources)
    views = []
    for resource in resources:
        if resource.resource_type != NODE_GROUP:
            continue
        props = resource.props
        template_ref = mapping(props.get("launchTemplate"))
        template = _linked(resource, templates, template_ref) if template_ref else None
        types = tuple(t for t in items(props.get("instanceTypes")) if isinstance(t, str))
        if not types and template is not None and text(template.props.get("instanceType")):
            types = (text(template.props.get("instanceType")),)
        scaling = mapping(props.get("scalingConfig"))
        view = NodeGroupView(
            resource=resource,
            labels=string_map(props.get("labels")),
            capacity_type=text(props.get("capacityType")) or "ON_DEMAND",
            instance_types=types,
            min_size=whole(scaling.get("minSize"), 0),
            max_size=whole(scaling.get("maxSize"), 0),
            desired_size=whole(scaling.get("desiredSize"), whole(scaling.get("minSize"), 0)),
            launch_template=template,
            asg_tags=_asg_tags(resource, asg_tags),
        )
        _fill_advertised(view, mechanisms)
        views.append(view)
    return views + _karpenter_views(resources, mechanisms)


def _requirement(props: Mapping[str, Any], key: str) -> tuple[str, ...]:
    """The `In` values of a NodePool requirement on `key`."""
    for requirement in items(dig(props, "spec", "template", "spec", "requirements")):
        requirement = mapping(requirement)
        if text(requirement.get("key")) == key and text(requirement.get("operator")) == "In":
            return tuple(v for v in items(requirement.get("values")) if isinstance(v, str))
    return ()


def _karpenter_views(resources: Sequence[PolicyResource], mechanisms: DeviceMechanisms) -> list[NodeGroupView]:
    """Each Karpenter NodePool as a node group: one capacity type, its instance types, up to limits.nodes nodes."""
    classes = {text(dig(r.props, "metadata", "name")): r for r in resources if r.resource_type == KARPENTER_NODE_CLASS}
    views = []
    for resource in resources:
        if resource.resource_type != KARPENTER_NODE_POOL:
            continue
        props = resource.props
        capacity = _requirement(props, conventions.KARPENTER_CAPACITY_LABEL)
        # A pool that may launch spot (or whose capacity type is unconstrained, which allows spot) counts as spot.
        if not capacity or "spot" in capacity:
            capacity_type = "SPOT"
        else:
            capacity_type = KARPENTER_CAPACITY_TYPES.get(capacity[0], "ON_DEMAND") if len(capacity) == 1 else "ON_DEMAND"
        view = NodeGroupView(
            resource=resource,
            labels=string_map(dig(props, "spec", "template", "metadata", "labels")),
            capacity_type=capacity_type,
            instance_types=_requirement(props, INSTANCE_TYPE_LABEL),
            min_size=0,
            max_size=whole(dig(props, "spec", "limits", "nodes"), 0),
            desired_size=0,
            launch_template=None,
            node_class=classes.get(text(dig(props, "spec", "template", "spec", "nodeClassRef", "name"))),
        )
        _fill_advertised(view, mechanisms)
        views.append(view)
    return views


def _asg_tags(group: PolicyResource, tags: Sequence[PolicyResource]) -> dict[str, str]:
    """Tags on the group's Auto Scaling group: the Tag resources that take its name from the group."""
    found = {}
    for tag in tags:
        if group in tag.dependencies:
            entry = mapping(tag.props.get("tag"))
            found[text(entry.get("key"))] = text(entry.get("value"))
    return found


@dataclass(frozen=True)
class NodeSelection:
    """The nodes a release's DaemonSet runs on: its nodeSelector and required node-affinity terms (a node must
    satisfy one term); terms None when it sets no affinity of its own."""

    release: str
    node_selector: dict[str, str]
    terms: tuple[tuple[Mapping[str, Any], ...], ...] | None

    def selects(self, view: NodeGroupView) -> bool:
        if self.terms is not None and not self.terms:
            return False  # a required affinity without terms matches no node
        return view.carries(self.node_selector, self.terms or ())


def _affinity_terms(affinity: Any) -> tuple[tuple[Mapping[str, Any], ...], ...] | None:
    terms = dig(affinity, "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
    if terms is None:
        return None
    return tuple(tuple(mapping(e) for e in items(mapping(term).get("matchExpressions"))) for term in items(terms))


def _instance_label_terms(values: Mapping[str, Any]) -> tuple[tuple[Mapping[str, Any], ...], ...] | None:
    """supportedInstanceLabels as the EFA charts render it: one `key In values` term per key
    (aws/eks-charts stable/aws-efa-k8s-device-plugin and stable/aws-dranet templates/daemonset.yaml). Unset, the
    chart's default lists every EFA instance type, which selects every node with EFA interfaces."""
    labels = values.get("supportedInstanceLabels")
    if labels is None:
        return None
    wanted = [v for v in items(mapping(labels).get("values")) if isinstance(v, str)]
    return tuple(
        ({"key": key, "operator": "In", "values": wanted},) for key in items(mapping(labels).get("keys")) if isinstance(key, str)
    )


@dataclass(frozen=True)
class DeviceMechanisms:
    """What can hand devices to pods: the GPU operator's device plugin, and where they run, the EFA device
    plugin and the two DRA drivers."""

    operator: OperatorConfig | None
    gpu_drivers: tuple[NodeSelection, ...]   # every release of each chart: each runs its own DaemonSet
    efa_drivers: tuple[NodeSelection, ...]
    efa_plugins: tuple[NodeSelection, ...]


def device_mechanisms(resources: Sequence[PolicyResource]) -> DeviceMechanisms:
    releases = helm_releases(resources)
    gpu_drivers = []
    for release in (r for r in releases if chart_name(r.props) == GPU_DRA_CHART):
        values = mapping(release.props.get("values"))
        # dra-driver-nvidia-gpu values.yaml: resources.gpus.enabled (default true) decides whether it serves GPUs;
        # without kubeletPlugin.affinity its default selects the NFD/GFD labels every NVIDIA node carries.
        if dig(values, "resources", "gpus", "enabled") is not False:
            plugin = mapping(values.get("kubeletPlugin"))
            gpu_drivers.append(NodeSelection(
                release.name, string_map(plugin.get("nodeSelector")), _affinity_terms(plugin.get("affinity"))
            ))

    def efa_selections(chart: str) -> tuple[NodeSelection, ...]:
        found = []
        for release in (r for r in releases if chart_name(r.props) == chart):
            values = mapping(release.props.get("values"))
            found.append(NodeSelection(release.name, string_map(values.get("nodeSelector")), _instance_label_terms(values)))
        return tuple(found)

    return DeviceMechanisms(
        gpu_operator(resources), tuple(gpu_drivers), efa_selections(EFA_DRA_CHART), efa_selections(EFA_PLUGIN_CHART)
    )


def _fill_advertised(view: NodeGroupView, mechanisms: DeviceMechanisms) -> None:
    """What one node offers through every mechanism that runs on it, per kind; the same devices from two is a
    problem. A GPU group no DRA driver selects has unknown resources when the stack installs no GPU operator."""
    instance = view.instance
    by_device: dict[str, list[Mechanism]] = {}

    def offer(device: str, mechanism: Mechanism, resources: Mapping[str, int]) -> None:
        by_device.setdefault(device, []).append(mechanism)
        found = view.plugin_resources if mechanism.kind == DEVICE_PLUGIN else view.claimable
        for name, amount in resources.items():
            found[name] = max(found.get(name, 0), amount)  # the node's devices, however many hand them out

    efa = view.efa_devices
    if efa:
        for plugin in mechanisms.efa_plugins:
            if plugin.selects(view):
                offer("EFA devices", Mechanism(DEVICE_PLUGIN, f"the EFA device plugin (release {plugin.release})"),
                      {EFA_RESOURCE: efa})
        for driver in mechanisms.efa_drivers:
            if driver.selects(view):
                offer("EFA devices", Mechanism(DRA_DRIVER, f"the EFA DRA driver (release {driver.release})"),
                      {EFA_CLASS: efa})
    gpus = instance.gpu_count if instance is not None else 0
    operator = mechanisms.operator
    drivers = [d for d in mechanisms.gpu_drivers if d.selects(view)]
    if gpus:
        if operator is None and not drivers:
            view.problems.append("the stack installs no gpu-operator release, so its GPU resources are unknown")
            return
        if operator is not None and operator.plugin_enabled and view.labels.get(DEVICE_PLUGIN_DEPLOY_LABEL) != "false":
            offer("GPUs", Mechanism(DEVICE_PLUGIN, f"the GPU operator's device plugin (release {operator.release})"),
                  _gpu_resources(view, instance, operator))
        for driver in drivers:
            offer("GPUs", Mechanism(DRA_DRIVER, f"the NVIDIA DRA driver (release {driver.release})"),
                  _dra_gpus(view, instance, operator))
    view.mechanisms = by_device
    for device, handed_by in by_device.items():
        if len(handed_by) > 1:
            view.problems.append(f"its {device} are handed out by both {' and '.join(map(str, handed_by))}")
    view.plugin_resources = {name: amount for name, amount in view.plugin_resources.items() if amount > 0}
    view.claimable = {name: amount for name, amount in view.claimable.items() if amount > 0}
    offered = dict(view.plugin_resources)
    claimed: dict[str, int] = {}
    for device_class, amount in view.claimable.items():
        _add(claimed, CLASS_RESOURCES[device_class], amount)
    for name, amount in claimed.items():
        offered[name] = max(offered.get(name, 0), amount)
    view.advertised = offered


def _dra_gpus(view: NodeGroupView, instance: InstanceType, operator: OperatorConfig | None) -> dict[str, int]:
    """Devices the NVIDIA DRA driver publishes on a node, by DeviceClass: one mig.nvidia.com device per MIG slice of
    a GPU mig-manager cut (static MIG, the nvidia.com/mig.config label), one gpu.nvidia.com device per other GPU
    (dra-driver-nvidia-gpu v0.4.0 cmd/gpu-kubelet-plugin/mig.go publishes a MIG-enabled GPU's slices as type
    'mig', deviceinfo.go a whole GPU as type 'gpu'; templates/deviceclass-gpu.yaml and deviceclass-mig.yaml select
    each type)."""
    mig_config = view.labels.get(conventions.MIG_CONFIG_LABEL)
    if operator is None or not mig_config:
        return {GPU_CLASS: instance.gpu_count}
    entries = operator.mig_entries(mig_config, instance)
    if entries is None:
        problem = (f"its nodes select {conventions.MIG_CONFIG_LABEL}={mig_config} but release {operator.release} "
                   "defines no MIG config of that name")
        if problem not in view.problems:
            view.problems.append(problem)
        return {}
    found: dict[str, int] = {}
    for entry in entries:
        entry = mapping(entry)
        devices = entry.get("devices")
        count = instance.gpu_count if devices == "all" or devices is None else len(items(devices))
        if entry.get("mig-enabled") is True:
            _add(found, MIG_CLASS, count * sum(whole(n, 0) for n in mapping(entry.get("mig-devices")).values()))
        else:
            _add(found, GPU_CLASS, count)
    return found


def _add(total: dict[str, int], name: str, amount: int) -> None:
    if amount > 0:
        total[name] = total.get(name, 0) + amount


def _gpu_resources(view: NodeGroupView, instance: InstanceType, operator: OperatorConfig) -> dict[str, int]:
    gpus = instance.gpu_count
    found: dict[str, int] = {}
    mig_config = view.labels.get(conventions.MIG_CONFIG_LABEL)
    if mig_config:
        entries = operator.mig_entries(mig_config, instance)
        if entries is None:
            view.problems.append(
                f"its nodes select {conventions.MIG_CONFIG_LABEL}={mig_config} but release {operator.release} "
                "defines no MIG config of that name"
            )
            return found
        for entry in entries:
            entry = mapping(entry)
            devices = entry.get("devices")
            count = gpus if devices == "all" or devices is None else len(items(devices))
            if entry.get("mig-enabled") is True:
                for profile, per_gpu in mapping(entry.get("mig-devices")).items():
                    name = f"nvidia.com/mig-{profile}" if operator.mig_strategy == "mixed" else WHOLE_GPU
                    _add(found, name, count * whole(per_gpu, 0))
            else:
                _add(found, WHOLE_GPU, count)
        return found
    key = view.labels.get(conventions.DEVICE_PLUGIN_CONFIG_LABEL) or operator.plugin_default
    if not key:
        return {WHOLE_GPU: gpus}
    config = operator.plugin_configs.get(key)
    if config is None:
        view.problems.append(
            f"its nodes select device-plugin config {key!r} but release {operator.release} defines no such config"
        )
        return found
    sharing = mapping(dig(config, "sharing", "timeSlicing")) or mapping(dig(config, "sharing", "mps"))
    if not sharing:
        return {WHOLE_GPU: gpus}
    renamed = sharing.get("renameByDefault") is True
    for resource in items(sharing.get("resources")):
        resource = mapping(resource)
        if text(resource.get("name")) != WHOLE_GPU:
            continue
        name = text(resource.get("rename")) or (f"{WHOLE_GPU}.shared" if renamed else WHOLE_GPU)
        _add(found, name, gpus * whole(resource.get("replicas"), 1))
    return found


def describe_offer(groups: Sequence[NodeGroupView]) -> str:
    """'prod-h100-spot: nvidia.com/gpu=8, vpc.amazonaws.com/efa=32 per node; ...' for messages."""
    parts = []
    for group in groups:
        offered = [f"{k}={v}" for k, v in sorted(group.plugin_resources.items())]
        offered += [f"{v} {k} devices to claims" for k, v in sorted(group.claimable.items())]
        if group.advertised is None:
            offer = "unknown"
        elif offered:
            offer = ", ".join(offered) + " per node"
        else:
            offer = "no device resources"
        problems = f" ({'; '.join(group.problems)})" if group.problems else ""
        parts.append(f"{group.name}: {offer}{problems}")
    return "; ".join(parts) or "no node groups"


@dataclass(frozen=True)
class RegisteredWorkload:
    resource: PolicyResource
    workload: Workload
    claims: ClaimIndex  # the stack's claim templates, which its pods' claims resolve against
    autoscaled: bool = False  # a KEDA ScaledObject or an HPA scales it

    def __str__(self) -> str:
        return str(self.workload)

    @property
    def many_pods(self) -> bool:
        """Whether it can run more than one pod: replicas > 1, an autoscaler, or an LWS group of several pods."""
        found = self.workload
        return self.autoscaled or (found.replicas or 1) > 1 or sum(t.copies for t in found.templates) > 1

    @property
    def counts_shared_claims(self) -> bool:
        """A ResourceClaim named by many pods is allocated once, not per pod: its devices count only for one pod."""
        return not self.many_pods

    def device_requests(self, template: PodTemplate) -> dict[str, float]:
        return template.device_requests(self.claims, self.counts_shared_claims)

    def device_requests_per_replica(self) -> dict[str, float]:
        return self.workload.device_requests_per_replica(self.claims, self.counts_shared_claims)

    def gpu_template(self) -> PodTemplate | None:
        return self.workload.gpu_template(self.claims, self.counts_shared_claims)

    @property
    def claims_resolve(self) -> bool:
        """Whether every claim of its pods resolves to devices the rules can count (gpu-requests-advertised
        reports those that do not)."""
        return not self.workload.claim_problems(self.claims) and not (self.many_pods and self.workload.shared_claims())


def _autoscaled(resources: Sequence[PolicyResource]) -> set[tuple[str, str, str]]:
    """(kind, namespace, name) of every workload a KEDA ScaledObject or a HorizontalPodAutoscaler targets."""
    found = set()
    for resource in resources:
        if resource.resource_type != KEDA_SCALED_OBJECT and kind_of(resource.resource_type) != HPA_KIND:
            continue
        target = mapping(dig(resource.props, "spec", "scaleTargetRef"))
        namespace = text(dig(resource.props, "metadata", "namespace")) or "default"
        found.add((text(target.get("kind")) or "Deployment", namespace, text(target.get("name"))))
    return found


# Several stack policies read the workloads of the same resources in one run: parse them once. The
# entry holds the resources it was built from, so it is reused only for those very objects.
_last_workloads: tuple[tuple[PolicyResource, ...], tuple[RegisteredWorkload, ...]] = ((), ())


def workloads(resources: Sequence[PolicyResource]) -> tuple[RegisteredWorkload, ...]:
    global _last_workloads
    key = tuple(resources)
    seen, found = _last_workloads
    if len(seen) == len(key) and all(a is b for a, b in zip(seen, key)) and key:
        return found
    claims = ClaimIndex(key)
    scaled = _autoscaled(key)
    found = tuple(
        RegisteredWorkload(resource, view, claims, (view.kind, view.namespace, view.name) in scaled)
        for resource in key
        if (view := workload(resource.resource_type, resource.props, resource.name)) is not None
    )
    _last_workloads = (key, found)
    return found


def candidates(groups: Sequence[NodeGroupView], template: PodTemplate) -> list[NodeGroupView]:
    """Node groups whose nodes the template's pods may land on."""
    return [g for g in groups if g.can_run(template)]
