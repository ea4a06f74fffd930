"""Validate a whole stack: every independent refusal in one run, then the stack as it deploys.

Checks run in a fixed order. A check that reads what an earlier one refused is skipped rather than run on
bad input (a service on a refused pool, the budget of a fleet that cannot be placed, the zones of a region
that does not exist), so each refusal reported is one the user has to fix, not an echo of another.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from inferstack.aws import refusals as aws_refusals
from inferstack.planning import refusals as planning_refusals
from inferstack.planning.auto_placement import is_auto, resolve_models
from inferstack.planning.disaggregation import expand as expand_engines, prefill_engine, service_of
from inferstack.planning.minimum_capacity import minimum_capacity_refusals
from inferstack.platform import dra_refusals, refusals as platform_refusals
from inferstack.serving import refusals as serving_refusals
from inferstack.spec import ModelServiceSpec, PrefillSpec, StackSpec
from inferstack.spec import checks as spec_checks, pool_checks, service_checks
from inferstack.spec.errors import SpecError, refused
from inferstack.spec.pools import PoolHardware

MAX_REFUSALS = 20  # reported together; past this many the rest are likely echoes of these


@dataclass(frozen=True)
class ValidatedStack:
    """A stack every layer accepts, as written and as it deploys.

    `stack` has every `auto` placement decided and each disaggregated service's prefill engines listed after it
    (it is `written` itself when there is neither); `pools` is each pool's hardware, read once; `auto_reasons`
    says, per service auto placement placed, which pool it chose and why.
    """

    written: StackSpec
    stack: StackSpec
    pools: Mapping[str, PoolHardware]
    auto_placed: tuple[str, ...]
    auto_reasons: Mapping[str, str]

    @property
    def environment(self) -> str:
        return self.stack.environment


def validate(spec: StackSpec) -> ValidatedStack:
    """The stack as it deploys; raises SpecError with every independent refusal found (up to MAX_REFUSALS)."""
    found: list[SpecError] = []
    unique = spec_checks.unique_name_refusals(spec)
    found += unique
    if not unique:
        found += serving_refusals.name_refusals(spec)
    found += spec_checks.stack_refusals(spec)
    pools = _valid_pools(spec, found)
    found += platform_refusals.stack_refusals(spec)
    found += aws_refusals.cluster_refusals(spec)
    pool_names = [pool.name for pool in spec.node_pools]
    ready = [i for i in range(len(spec.models)) if not _service_refusals(spec, i, pool_names, found)]
    every_pool = len(pools) == len(spec.node_pools) and not unique
    placed, auto_reasons = _placed(spec, ready, pools, every_pool, found)
    engines_valid = _engine_refusals(spec, placed, pools, found)
    complete = every_pool and len(placed) == len(spec.models) and engines_valid
    engines = expand_engines([model for _, model in placed], pools) if complete else ()
    stack = spec.model_copy(update={"models": list(engines)}) if complete and engines != tuple(spec.models) else spec
    found += spec_checks.workload_refusals(spec)
    found += platform_refusals.worker_refusals(spec)
    if complete:
        found += serving_refusals.batch_job_refusals(stack)
    if every_pool:
        found += spec_checks.queue_refusals(spec, pools)
    if complete:
        found += minimum_capacity_refusals(spec, engines, pools)
    region = spec_checks.region_known(spec)
    zones = spec_checks.zone_refusals(spec) if region else []
    found += zones
    if every_pool:  # a node group's tags carry what its pool's hardware advertises
        found += aws_refusals.name_refusals(spec)
    if region and not zones:  # the layout would only say a zone that does not exist has no address slot
        found += aws_refusals.network_refusals(spec)
    if complete and region and not found:
        found += planning_refusals.budget_refusals(stack)  # its min scale sizes the resolved engines
    if found:
        raise refused(found[:MAX_REFUSALS], hidden=len(found) - MAX_REFUSALS)
    placements = dict(placed)
    auto_placed = tuple(m.name for i, m in enumerate(spec.models) if placements[i] != m)
    return ValidatedStack(written=spec, stack=stack, pools=pools, auto_placed=auto_placed, auto_reasons=auto_reasons)


def as_validated(stack: StackSpec | ValidatedStack) -> ValidatedStack:
    """A validated stack as it is; a spec built in code (a script, a test) validated now."""
    return stack if isinstance(stack, ValidatedStack) else validate(stack)


def _valid_pools(spec: StackSpec, found: list[SpecError]) -> dict[str, PoolHardware]:
    """Each pool's hardware, for the pools no rule refused."""
    pools: dict[str, PoolHardware] = {}
    for index, pool in enumerate(spec.node_pools):
        hardware, problems = pool_checks.pool_refusals(spec, index)
        problems += aws_refusals.pool_refusals(spec, index)
        if hardware is not None:
            problems += platform_refusals.pool_refusals(spec, index, hardware)
            problems += dra_refusals.pool_refusals(spec, index, hardware)
        found += problems
        if hardware is not None and not problems:
            pools.setdefault(pool.name, hardware)
    return pools


def _service_refusals(spec: StackSpec, index: int, pool_names: list[str], found: list[SpecError]) -> bool:
    """What a service must be before it is placed: a pool of the stack, an architecture, a quantization vLLM
    can serve from its checkpoint. True when it was refused."""
    problems = service_checks.service_refusals(spec, index, pool_names)
    if not problems:
        problems = planning_refusals.quantization_refusals(spec, index)
    found += problems
    return bool(problems)


def _placed(
    spec: StackSpec, ready: list[int], pools: dict[str, PoolHardware], every_pool: bool, found: list[SpecError]
) -> tuple[list[tuple[int, ModelServiceSpec]], dict[str, str]]:
    """(index, service) with `auto` decided, and why auto placed each service it placed: every service once every
    pool and service passed (auto placement weighs them all together), else the services that name a valid pool
    and place nothing automatically."""
    if every_pool and len(ready) == len(spec.models):
        try:
            models, reasons = resolve_models(spec, pools)
        except SpecError as error:
            found += error.refusals
            return [], {}
        return list(enumerate(models)), reasons
    return [
        (i, spec.models[i]) for i in ready
        if not is_auto(spec.models[i]) and spec.models[i].pool in pools and _prefill_pool_valid(spec, spec.models[i], pools)
    ], {}


def _prefill_pool_valid(spec: StackSpec, model: ModelServiceSpec, pools: dict[str, PoolHardware]) -> bool:
    """A prefill role on a pool that was refused is checked once that pool is mended."""
    role = model.disaggregation.prefill if model.disaggregation is not None else None
    return role is None or role.pool is None or role.pool in pools or role.pool not in {p.name for p in spec.node_pools}


def _engine_refusals(
    spec: StackSpec, placed: list[tuple[int, ModelServiceSpec]], pools: dict[str, PoolHardware], found: list[SpecError]
) -> bool:
    """Each placed service's first problem (its rules build on each other), and its prefill engine's. True when
    none was refused."""
    valid = True
    for index, model in placed:
        path = f"models[{index}]"
        try:
            _check_engine(spec, path, model, pools)
            if model.disaggregation is not None:
                serving_refusals.check_disaggregation(spec, path, model, pools)
                _check_prefill_engine(spec, path, prefill_engine(model), pools)
        except SpecError as error:
            found += error.refusals
            valid = False
    return valid


def _check_engine(spec: StackSpec, path: str, model: ModelServiceSpec, pools: dict[str, PoolHardware]) -> None:
    """One engine on its pool: the spec's rules, then what the platform, its pods and planning need of it."""
    hardware = pools[model.pool]
    service_checks.check_model(spec, path, model, hardware)
    platform_refusals.check_model(spec, path, model)
    dra_refusals.check_model(path, model, hardware)
    serving_refusals.check_model(spec, path, model, hardware)
    planning_refusals.check_model(path, model, service_of(spec.models, model), hardware)


def _check_prefill_engine(spec: StackSpec, path: str, engine: ModelServiceSpec, pools: dict[str, PoolHardware]) -> None:
    """The prefill engine's own checks, reported where the spec holds the field: the role's shape under
    disaggregation.prefill, everything it shares with the service on the service."""
    role = f"{path}.disaggregation.prefill"
    try:
        _check_engine(spec, role, engine, pools)
    except SpecError as error:
        field = error.path.removeprefix(f"{role}.")
        if field.split(".")[0].split("[")[0] in PrefillSpec.model_fields:
            raise
        raise SpecError(f"{path}.{field}", f"its prefill engine: {error.problem}", error.fix) from None
