"""The embedded engine: the Pulumi program run offline under Pulumi's mock runtime, and the render it writes.

mocks.py answers each resource as its provider would, recorder.py records what the program registers and reads,
render.py writes resources.json, the Kubernetes objects, the Helm releases and the plan it is given. It imports
Pulumi and the program; never `inferstack.presentation`, which reads its recordings (tests/test_layout.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from inferstack.engine.mocks import PlanMocks
from inferstack.engine.recorder import Recording, record

if TYPE_CHECKING:  # the spec (pydantic) loads with the program, not with the engine
    from inferstack.spec import StackSpec
    from inferstack.validation import ValidatedStack


def run_stack(stack: StackSpec | ValidatedStack) -> Recording:
    """Run the very program `pulumi up` runs for this validated stack (a spec is validated first) and record
    every registration."""
    from inferstack.program import deploy
    from inferstack.validation import as_validated

    validated = as_validated(stack)
    return record(lambda: deploy(validated), validated.environment, PlanMocks(validated.stack.region))
