"""What `pulumi preview --policy-pack policies` runs: serve the inferstack rules to the engine.

Constructing a PolicyPack starts the analyzer's gRPC server and blocks, so nothing else belongs here.
"""

from pulumi_policy import PolicyPack

from inferstack.policies.rules import PACK_ENFORCEMENT, PACK_NAME, POLICIES

PolicyPack(PACK_NAME, POLICIES, enforcement_level=PACK_ENFORCEMENT)
