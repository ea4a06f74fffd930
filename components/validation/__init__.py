"""The validation room: one entry point, `validate(spec) -> ValidatedStack`, above the layers.

It asks the spec for its own rules and each layer for its refusals (aws, platform, serving, planning: each rule
lives beside the code whose behaviour it protects), gathers the independent ones into one report, and hands on
what it decided once (services placed, engines expanded, pools' hardware) to the CLI, the Pulumi program and the
plan. It imports the layers; no layer imports it.
"""

from inferstack.validation.stack import MAX_REFUSALS, ValidatedStack, as_validated, validate

__all__ = ["MAX_REFUSALS", "ValidatedStack", "as_validated", "validate"]
