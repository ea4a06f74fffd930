"""The Pulumi program: `pulumi up -s <env>` deploys the stack spec in stacks/<env>.py."""

from pathlib import Path

import pulumi

from inferstack.program import deploy_or_fail

deploy_or_fail(Path(__file__).parent, pulumi.get_stack())
