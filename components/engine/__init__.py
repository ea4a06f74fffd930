"""The embedded engine: the Pulumi program run offline under Pulumi's mock runtime."""

from __future__ import annotations

from inferstack.engine.mocks import PlanMocks
from inferstack.engine.recorder import Recording, record
from inferstack.spec import StackSpec


def run_stack(spec: StackSpec) -> Recording:
    """Run the very program `pulumi up` runs for this spec and record every registration."""
    from inferstack.program import deploy

    return record(lambda: deploy(spec), spec.environment, PlanMocks(spec.region))
