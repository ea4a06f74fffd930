"""What a pinned image reference is: a version tag or a digest, never a channel tag that moves.

The spec refuses an unpinned image it names, with its field; the policy pack's images-pinned applies the same
rule to every rendered workload and chart value (policies/pinning.py).
"""

from __future__ import annotations

import re

# Tags that move: they name a channel, not a version.
FLOATING_TAGS = ("latest", "main", "master", "nightly", "stable", "edge", "dev")
DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")


def image_problem(image: str) -> str | None:
    """Why an image reference is not pinned, or None when it names a version tag or a digest."""
    if not image:
        return "has no image"
    name, _, digest = image.partition("@")
    if digest:
        return None if DIGEST.match(digest) else f"has a malformed digest {digest!r}"
    last = name.rsplit("/", 1)[-1]
    if ":" not in last:
        return "has no tag (Kubernetes pulls :latest)"
    tag = last.rsplit(":", 1)[1]
    if tag.lower() in FLOATING_TAGS:
        return f"uses the moving tag {tag!r}"
    return None
