"""`inferstack models`: the model catalog as a table, one model's facts, and where it fits.

The facts come from the catalog (catalog/models.json, each with its source); whether a model fits
a GPU is planning.sizing.fit on a one-pool stack of that GPU's instance types, fewest GPUs first,
in a layout sizing.parallelism_problem accepts, the same figures and rules the plan uses, so this
view never computes sizes of its own.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from inferstack.catalog import INSTANCE_TYPES, InstanceType
from inferstack.catalog import models as model_catalog
from inferstack.planning.sizing import GIB, fit, parallelism_problem
from inferstack.spec import (
    SIXTEEN_BIT, CheckpointFormat, ModelArchitecture, ModelServiceSpec, NodePoolSpec, catalog_stored_format,
)
from inferstack.spec.pools import PoolHardware

# The context every model is also sized at: a common serving length, and the spec's max_model_len default.
COMMON_CONTEXT = 8192
PROBE_POOL = "probe"


class UnknownModel(LookupError):
    """A name the catalog does not list; the message suggests close ones."""

    def __init__(self, name: str) -> None:
        known = sorted(set(model_catalog.known_model_ids()))
        # Compare the name part too (after the organisation), case-blind: 'llama-3.1-8b' finds its model.
        by_short = {model_id.split("/")[-1].lower(): model_id for model_id in known}
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        close += [by_short[short] for short in difflib.get_close_matches(name.split("/")[-1].lower(), by_short, n=3)
                  if by_short[short] not in close]
        hint = f"did you mean {' or '.join(repr(c) for c in close[:3])}?" if close else "`inferstack models` lists them."
        super().__init__(f"the model catalog has no {name!r}; {hint} To fix: give a name `inferstack models` lists")


# --------------------------------------------------------------------------------------------- facts


def architecture(model_id: str) -> ModelArchitecture:
    """The catalog's architecture of a model or of the base model of a quantized checkpoint."""
    return _probe(model_id).resolved_architecture


def stored_format(model_id: str) -> CheckpointFormat:
    return catalog_stored_format(model_id) or SIXTEEN_BIT


def kind(arch: ModelArchitecture) -> str:
    if arch.task == "embed":
        return "embed"
    return "MoE" if arch.experts is not None else "dense"


def attention(arch: ModelArchitecture) -> str:
    label = arch.attention.upper()
    if arch.sliding_window is not None:
        label += f" + window {arch.sliding_window} on {arch.windowed_layers}/{arch.layers} layers"
    if arch.attention_chunk_size is not None and arch.chunked_layers:
        label += f" + {arch.attention_chunk_size}-token chunks on {arch.chunked_layers}/{arch.layers} layers"
    return label


def format_label(stored: CheckpointFormat) -> str:
    """e.g. 'bf16', 'awq int4', 'compressed-tensors fp8 w8a8', 'mxfp4 experts'."""
    if stored.quant_method == "none":
        return "bf16"
    width = f"{'int' if stored.weight_type == 'int' else 'fp'}{stored.weight_bits}"
    label = stored.quant_method if stored.quant_method in ("fp8", "mxfp4") else f"{stored.quant_method} {width}"
    if stored.activation_bits == 8:
        label += " w8a8"
    if getattr(stored, "applies_to", "linear") == "experts":
        label += " experts"
    return label


def formats(model_id: str) -> list[str]:
    """The model's own stored format, then those of its catalog checkpoints (each once)."""
    labels = [format_label(stored_format(model_id))]
    for checkpoint in model_catalog.checkpoints_of(model_id):
        label = format_label(stored_format(checkpoint))
        if label not in labels:
            labels.append(label)
    return labels


def catalog_rows() -> list[dict[str, Any]]:
    """One row per base model of the catalog."""
    rows = []
    for name in sorted(model_catalog.MODELS):
        arch = architecture(name)
        rows.append({
            "name": name,
            "kind": kind(arch),
            "params_billion": arch.params_billion,
            "active_params_billion": arch.active_params_billion,
            "attention": attention(arch),
            "formats": formats(name),
            "context": arch.max_context,
        })
    return rows


def model_report(name: str) -> dict[str, Any]:
    """One model's (or checkpoint's) facts with their sources, and its fit on each catalog GPU."""
    if name not in model_catalog.known_model_ids():
        raise UnknownModel(name)
    arch = architecture(name)
    base = model_catalog.base_model(name)
    checkpoint = model_catalog.CHECKPOINTS.get(name)
    return {
        "name": name,
        "base_model": base,
        "kind": kind(arch),
        "architecture": arch.model_dump(exclude_none=True),
        "attention": attention(arch),
        "stored_format": stored_format(name).model_dump(),
        "stored_format_source": checkpoint["source"] if checkpoint else None,
        "download_bytes": model_catalog.download_bytes(name),
        "checkpoints": [
            {"name": c, "format": format_label(stored_format(c)), "source": model_catalog.CHECKPOINTS[c]["source"]}
            for c in model_catalog.checkpoints_of(name)
        ],
        "source": model_catalog.model_source(base),
        "fits": [fit_row for gpu_type in smallest_type_per_gpu() for fit_row in _fits_on(name, arch, gpu_type)],
    }


def reading_as_yaml(reading: dict[str, Any], path: Path) -> str:
    note = f"# read from {path}; paste into the model service (params are computed from the shapes)\n"
    return note + yaml.safe_dump(reading, sort_keys=False)


# ----------------------------------------------------------------------------------------------- fit


def smallest_type_per_gpu() -> list[InstanceType]:
    """For each GPU of the catalog, the instance type with the fewest GPUs (then vCPUs, then memory)."""
    smallest: dict[str, InstanceType] = {}
    for candidate in INSTANCE_TYPES.values():
        known = smallest.get(candidate.gpu.name)
        if known is None or _size(candidate) < _size(known):
            smallest[candidate.gpu.name] = candidate
    return sorted(smallest.values(), key=lambda t: (t.gpu.memory_mib, t.gpu.name))


def _size(instance: InstanceType) -> tuple[int, int, int]:
    return instance.gpu_count, instance.vcpus, instance.memory_mib


def _contexts(arch: ModelArchitecture) -> list[int]:
    return sorted({arch.max_context, min(COMMON_CONTEXT, arch.max_context)}, reverse=True)


def _node_types(instance: InstanceType) -> list[InstanceType]:
    """The given (smallest) type of a GPU, then for each larger GPU count of that GPU its smallest type."""
    by_count = {instance.gpu_count: instance}
    for candidate in sorted(INSTANCE_TYPES.values(), key=_size):
        if candidate.gpu.name == instance.gpu.name:
            by_count.setdefault(candidate.gpu_count, candidate)
    return [by_count[count] for count in sorted(by_count)]


def _layouts(name: str, context: int, node: InstanceType, fewer_than: int) -> Iterable[ModelServiceSpec]:
    """The node's tensor-parallel sizes above `fewer_than` GPUs, fewest first; an MoE model also with expert
    parallelism where the auto layout is one vLLM refuses (e.g. experts that split off their blocks)."""
    for tensor_parallel in range(1, node.gpu_count + 1):
        if node.gpu_count % tensor_parallel or tensor_parallel <= fewer_than:
            continue
        service = _probe(name, tensor_parallel=tensor_parallel, max_model_len=context)
        yield service
        if (service.resolved_architecture.experts and not service.resolved_expert_parallel
                and tensor_parallel > 1 and parallelism_problem(service) is not None):
            yield service.model_copy(update={"expert_parallel": True})


def _fits_on(name: str, arch: ModelArchitecture, instance: InstanceType) -> Iterable[dict[str, Any]]:
    """At each context, the fewest GPUs of this GPU kind that hold the model in a layout vLLM loads: one GPU of
    the smallest type, else a tensor-parallel group on it or on a node type of the same GPU with more of them
    (gpt-oss-120b: 4 x A10G at tensor_parallel 4). When none does, the last layout tried and why not."""
    for context in _contexts(arch):
        tried: tuple[InstanceType, ModelServiceSpec, str | None, Any] | None = None
        fewer_than = 0
        for node in _node_types(instance):
            hardware = PoolHardware(NodePoolSpec(name=PROBE_POOL, instance_types=[node.name], max_nodes=1))
            for service in _layouts(name, context, node, fewer_than):
                problem = parallelism_problem(service)
                tried = (node, service, problem, None if problem else fit(service, hardware))
                if tried[3] is not None and tried[3].starts:
                    break
            else:
                fewer_than = node.gpu_count
                continue
            break
        node, service, problem, sized = tried
        row = {"gpu": node.gpu.name, "instance_type": node.name, "gpus_per_node": node.gpu_count,
               "context": context, "tensor_parallel": service.tensor_parallel,
               "expert_parallel": service.resolved_expert_parallel}
        if sized is None:
            yield row | {"fits": False, "sequences": 0, "problem": problem}
            continue
        yield row | {"fits": sized.starts, "sequences": sized.max_concurrency,
                     "weights_gib_per_gpu": round(sized.weights_bytes_per_device / GIB, 1),
                     "kv_cache_tokens": sized.kv_tokens}


def _probe(model_id: str, tensor_parallel: int = 1, max_model_len: int = COMMON_CONTEXT) -> ModelServiceSpec:
    """A one-replica service of the model, as a stack would state it, for the catalog's facts and sizing."""
    return ModelServiceSpec(
        name="probe", model=model_id, pool=PROBE_POOL, tensor_parallel=tensor_parallel, max_model_len=max_model_len
    )


# ---------------------------------------------------------------------------------------------- text


def _billions(total: float, active: float | None) -> str:
    return f"{total:g}B" if active is None else f"{total:g}B / {active:g}B"


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in [header, *rows]]
    return "\n".join(lines)


def catalog_as_text(rows: list[dict[str, Any]]) -> str:
    header = ["MODEL", "KIND", "PARAMS total / active", "ATTENTION", "FORMATS", "CONTEXT"]
    body = [[r["name"], r["kind"], _billions(r["params_billion"], r["active_params_billion"]), r["attention"],
             ", ".join(r["formats"]), str(r["context"])] for r in rows]
    return _table(header, body) + f"\n\n{len(rows)} models. `inferstack models NAME` shows one and where it fits."


def report_as_text(report: dict[str, Any]) -> str:
    arch = report["architecture"]
    lines = [report["name"]]
    if report["base_model"] != report["name"]:
        lines.append(f"  quantized checkpoint of {report['base_model']}")
    lines += [f"  kind: {report['kind']}", f"  attention: {report['attention']}",
              f"  stored as: {format_label(CheckpointFormat(**report['stored_format']))}"]
    if report["stored_format_source"]:
        lines.append(f"    source: {report['stored_format_source']}")
    lines.append("  architecture:")
    stated = ModelArchitecture(**arch).model_dump(exclude_defaults=True)  # the dense defaults add nothing to read
    lines += [f"    {key}: {value}" for key, value in stated.items()]
    lines.append(f"  source: {report['source']}")
    if report["checkpoints"]:
        lines.append("  catalog checkpoints:")
        lines += [f"    {c['name']}: {c['format']} ({c['source']})" for c in report["checkpoints"]]
    header = ["GPU", "INSTANCE", "CONTEXT", "TP", "FITS", "SEQUENCES", "WEIGHTS GiB/GPU", "KV TOKENS"]
    body = [[f["gpu"], f["instance_type"], str(f["context"]),
             f"{f['tensor_parallel']}{' + EP' if f['expert_parallel'] else ''}", "yes" if f["fits"] else "no",
             str(f["sequences"]), str(f.get("weights_gib_per_gpu", "-")), str(f.get("kv_cache_tokens", f.get("problem", "-")))]
            for f in report["fits"]]
    lines += ["", "Where it fits (one replica; full-length sequences held at once; TP = the fewest GPUs of a node "
              "of that GPU that hold it, + EP with expert parallelism):", _table(header, body)]
    return "\n".join(lines)
