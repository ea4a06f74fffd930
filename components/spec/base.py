"""The spec's strict base model and the types and patterns its modules share.

Field descriptions end with their default so `inferstack schema` documents the spec completely.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
NAME_MAX_LENGTH = 40
Name = Annotated[str, StringConstraints(pattern=DNS_LABEL, min_length=1, max_length=NAME_MAX_LENGTH)]
# The bucket and key are checked by spec.checks against S3's naming rules, with a message per rule.
S3Uri = Annotated[str, StringConstraints(pattern=r"^s3://\S*$")]
PinnedImage = Annotated[
    str,
    StringConstraints(pattern=r"^[a-z0-9][a-z0-9._/-]*(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127}|@sha256:[a-f0-9]{64})$"),
]

AUTO = "auto"  # a model service's pool, tensor_parallel or mig_profile left to auto placement


class Model(BaseModel):
    """Strict, immutable base: unknown fields are errors, specs never change after validation."""

    model_config = ConfigDict(extra="forbid", frozen=True)
