"""The example stacks give every pre-fetch script the cache budget of the pool its pods run on."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from inferstack.engine.mocks import PlanMocks
from inferstack.engine.recorder import record
from inferstack.engine.render import kubernetes_objects
from inferstack.program import deploy
from inferstack.stacks import load_validated

STACKS = Path(__file__).resolve().parents[1] / "stacks"


def script_value(script: str, name: str) -> str:
    """The value the rendered script assigns to `name` in its header, unquoted as bash would."""
    line = next(line for line in script.splitlines() if line.startswith(f"{name}="))
    (assignment,) = shlex.split(line)
    return assignment.removeprefix(f"{name}=")


# 80% (the default budget_percent) of the smallest type's instance store, in EC2's decimal GB
# (DescribeInstanceTypes InstanceStorageInfo.TotalSizeInGB): g6.xlarge and g6e.xlarge 1x250 GB,
# p4de.24xlarge 8x1000 GB, p5.48xlarge 8x3800 GB.
EXPECTED_BUDGET = {
    "l4": 200 * 10**9,
    "l40s": 200 * 10**9,
    "l40s-batch": 200 * 10**9,
    "a100-mig": 6_400 * 10**9,
    "h100": 24_320 * 10**9,
}


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_prefetch_script_carries_its_pools_budget(stack):
    validated = load_validated(STACKS, stack)
    spec = validated.stack   # as it deploys
    objects = kubernetes_objects(record(lambda: deploy(validated), spec.environment, PlanMocks(spec.region)))
    pools = {m.name: m.pool for m in spec.models} | {j.name: j.pool for j in spec.batch_jobs}
    scripts = {
        o["metadata"]["name"].rpartition("-prefetch")[0]: o["data"]["prefetch.sh"]  # a batch job's ends in its revision
        for o in objects
        if o["kind"] == "ConfigMap" and "prefetch.sh" in o.get("data", {})
    }

    assert set(scripts) == set(pools)
    for owner, script in scripts.items():
        assert script_value(script, "cache_budget_bytes") == str(EXPECTED_BUDGET[pools[owner]]), owner
        assert script_value(script, "cache_dir") == "/models"
