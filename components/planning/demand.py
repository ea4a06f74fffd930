"""What the placement planners are asked and what they answer: a demand (a model service and the
choices left to the planner), the pools on offer with their node price, and the placement (where
every replica runs, what each pool buys). FIXED_MIX is the mix the tests and the benchmark plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from inferstack.catalog import INSTANCE_TYPES, Gpu, instance_type, on_demand_price
from inferstack.planning.sizing import Fit, kv_bytes_per_token, stated_sequences, weights_bytes
from inferstack.spec import MigSharing, ModelServiceSpec, NoSharing
from inferstack.spec.pools import PoolHardware

# Prices are compared in units of 1/10000 USD so that equal totals compare equal whatever the order
# of the additions.
PRICE_SCALE = 10_000


class PlacementError(ValueError):
    """No placement exists: the message names the demand and what would make it fit."""


@dataclass(frozen=True)
class Demand:
    """One model service to place: its spec (sizing reads it) and what the planner may choose."""

    model: ModelServiceSpec
    replicas: int = 1
    allowed: frozenset[str] | None = None    # pool names it may use; None = any pool
    tensor_parallel: int | None = None       # fixed GPUs per replica; None = the planner chooses
    mig_profile: str | None = None           # fixed MIG profile (MIG slices only); None = the planner chooses

    @classmethod
    def from_spec(cls, model: ModelServiceSpec, *, replicas: int | None = None) -> Demand:
        """Pool, tensor_parallel and mig_profile are the planner's to choose when left unset or 'auto';
        replicas default to min_replicas (at least 1)."""
        if model.pipeline_parallel > 1 or model.data_parallel > 1:
            layout = "pipeline_parallel" if model.pipeline_parallel > 1 else "data_parallel"
            raise PlacementError(
                f"model service {model.name!r} uses {layout}={getattr(model, layout)}: pipeline-parallel and "
                "data-parallel replicas are not auto-placed. To fix: name its pool and tensor_parallel explicitly."
            )

        def chosen(field: str):
            value = getattr(model, field)
            return None if field not in model.model_fields_set or value == "auto" else value

        pool = chosen("pool")
        return cls(
            model=model,
            replicas=max(1, model.autoscaling.min_replicas) if replicas is None else replicas,
            allowed=None if pool is None else frozenset({pool}),
            tensor_parallel=chosen("tensor_parallel"),
            mig_profile=chosen("mig_profile"),
        )

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def concurrency(self) -> int:
        """Full-length sequences the KV cache must hold at once."""
        return stated_sequences(self.model)

    @property
    def memory_need_bytes(self) -> tuple[int, int]:
        """(weights, KV cache for max_model_len x concurrency) in bytes."""
        kv = kv_bytes_per_token(self.model) * self.model.max_model_len * self.concurrency
        return weights_bytes(self.model), kv




@dataclass(frozen=True)
class PoolOption:
    """A pool the planner may buy nodes of. `mig`: every GPU is MIG-partitioned, the planner choosing each GPU's layout."""

    name: str
    instance_type: str
    gpu: Gpu
    gpus_per_node: int
    usd_per_hour: float
    mig: bool = False
    max_nodes: int | None = None

    @classmethod
    def from_instance_type(
        cls, name: str, type_name: str, *, region: str, mig: bool = False, usd_per_hour: float | None = None,
        max_nodes: int | None = None,
    ) -> PoolOption:
        """An option at the type's on-demand price in `region` unless `usd_per_hour` states one."""
        it = instance_type(type_name)
        price = on_demand_price(type_name, region) if usd_per_hour is None else usd_per_hour
        if price is None:
            raise PlacementError(
                f"pool {name!r}: {type_name} has no price in {region} in the catalog. To fix: pass usd_per_hour."
            )
        if mig and not it.gpu.mig_capable:
            raise PlacementError(f"pool {name!r}: {it.gpu.name} on {type_name} does not support MIG.")
        return cls(name, type_name, it.gpu, it.gpu_count, price, mig, max_nodes)

    @classmethod
    def from_hardware(cls, hardware: PoolHardware, *, region: str, usd_per_hour: float | None = None) -> PoolOption:
        """A stack pool as an option; its current MIG layout is not a constraint: the planner proposes layouts."""
        sharing = hardware.spec.gpu_sharing
        if not isinstance(sharing, (NoSharing, MigSharing)):
            raise PlacementError(
                f"pool {hardware.spec.name!r} shares GPUs by {sharing.mode}, which gives no memory isolation: "
                "it is not an auto-placement target. To fix: use whole GPUs or MIG."
            )
        return cls.from_instance_type(
            hardware.spec.name, hardware.primary.name, region=region, mig=isinstance(sharing, MigSharing),
            usd_per_hour=usd_per_hour, max_nodes=hardware.spec.max_nodes,
        )

    @property
    def price_units(self) -> int:
        return round(self.usd_per_hour * PRICE_SCALE)


def catalog_options(region: str) -> list[PoolOption]:
    """Every instance type the catalog prices in `region`, with whole GPUs, and MIG-partitioned where the GPU allows."""
    options = []
    for name, it in INSTANCE_TYPES.items():
        if on_demand_price(name, region) is None:
            continue
        slug = name.replace(".", "-")
        options.append(PoolOption.from_instance_type(slug, name, region=region))
        if it.gpu.mig_capable:
            options.append(PoolOption.from_instance_type(f"{slug}-mig", name, region=region, mig=True))
    return options


@dataclass(frozen=True)
class Assignment:
    """Where one replica runs: a node of a pool, whole GPUs of it or one MIG slice."""

    demand: str
    replica: int
    pool: str
    node: int                      # index of the node within the pool
    gpus: tuple[int, ...]          # GPU indices on that node (one GPU for a MIG slice)
    tensor_parallel: int           # 1 on a MIG slice
    mig_profile: str | None
    fit: Fit                       # sizing's view: KV tokens and full-length sequences it holds


@dataclass(frozen=True)
class PoolUse:
    """Nodes bought in one pool, and for MIG pools the layout of every GPU (GPU i is on node i // gpus_per_node)."""

    pool: str
    instance_type: str
    gpu: str
    gpus_per_node: int
    nodes: int
    usd_per_hour: float
    mig_layouts: tuple[Mapping[str, int], ...] = ()

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class Placement:
    assignments: tuple[Assignment, ...]
    pools: tuple[PoolUse, ...]

    @property
    def usd_per_hour(self) -> float:
        return sum(round(p.usd_per_hour * PRICE_SCALE) for p in self.pools) / PRICE_SCALE

    @property
    def total_gpus(self) -> int:
        """GPUs of the nodes bought (what is paid for), not only those in use."""
        return sum(p.gpus for p in self.pools)

    @property
    def nodes(self) -> dict[str, int]:
        return {p.pool: p.nodes for p in self.pools}

    def of(self, demand: str) -> list[Assignment]:
        return [a for a in self.assignments if a.demand == demand]


@dataclass(frozen=True)
class Mix:
    """A model mix and the pools it may use, as plain data for tests and the benchmark."""

    models: tuple[Mapping[str, object], ...]         # ModelServiceSpec fields (pool defaults to 'auto')
    pools: tuple[tuple[str, str, bool], ...]          # (pool name, instance type, MIG-partitioned)
    region: str                                       # whose on-demand prices the pools cost

    def demands(self) -> list[Demand]:
        return [Demand.from_spec(ModelServiceSpec(**{"pool": "auto", **m})) for m in self.models]

    def options(self) -> list[PoolOption]:
        return [PoolOption.from_instance_type(name, it, region=self.region, mig=mig) for name, it, mig in self.pools]


# Six services a team might run, on the node types it has: 4 x L40S nodes, and H100s either as 8-GPU
# nodes or single-GPU ones, whole or MIG-partitioned. Big nodes are where packing pays.
FIXED_MIX = Mix(
    models=(
        {"name": "chat-8b-fp8", "model": "neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8", "quantization": "fp8",
         "max_model_len": 8192, "max_num_seqs": 8},
        {"name": "embed-bge", "model": "BAAI/bge-large-en-v1.5", "max_model_len": 512, "max_num_seqs": 64},
        {"name": "embed-qwen", "model": "Qwen/Qwen3-Embedding-0.6B", "max_model_len": 8192, "max_num_seqs": 8},
        {"name": "chat-70b-awq", "model": "hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4",
         "quantization": "awq", "max_model_len": 16384, "max_num_seqs": 8},
        {"name": "qwen-7b-awq", "model": "Qwen/Qwen2.5-7B-Instruct-AWQ", "quantization": "awq",
         "max_model_len": 16384, "max_num_seqs": 4},
        {"name": "llama-3b", "model": "meta-llama/Llama-3.2-3B-Instruct", "max_model_len": 8192, "max_num_seqs": 4},
    ),
    pools=(
        ("l40s", "g6e.12xlarge", False),
        ("h100", "p5.48xlarge", False),
        ("h100-mig", "p5.48xlarge", True),
        ("h100-single-mig", "p5.4xlarge", True),
    ),
    region="us-east-1",
)
