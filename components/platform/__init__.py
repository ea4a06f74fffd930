"""The cluster platform layer: GPU operator, EFA device plugin, Kueue, KEDA, LeaderWorkerSet, metrics and
the node autoscaler, one component each, gathered by `ClusterPlatform`.

Quotas and advertised resources come from `inferstack.planning`; the layer never imports the engine or the
presentation (tests/test_layout.py).
"""

from inferstack.platform.platform import ClusterPlatform, ClusterPlatformArgs

__all__ = ["ClusterPlatform", "ClusterPlatformArgs"]
