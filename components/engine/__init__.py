"""The embedded engine: the Pulumi program run offline under Pulumi's mock runtime."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inferstack.engine.mocks import PlanMocks
from inferstack.engine.recorder import Recording, record

if TYPE_CHECKING:  # the spec (pydantic) loads with the program, not with the engine
    from inferstack.spec import StackSpec


def run_stack(spec: StackSpec) -> Recording:
    """Run the very program `pulumi up` runs for this spec and record every registration."""
    from inferstack.program import deploy

    return record(lambda: deploy(spec), spec.environment, PlanMocks(spec.region))
