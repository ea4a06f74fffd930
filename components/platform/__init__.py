"""The cluster platform layer: GPU operator, EFA device plugin, Kueue, KEDA, LeaderWorkerSet, metrics and
the node autoscaler, one component each, gathered by `ClusterPlatform`."""

from inferstack.platform.platform import ClusterPlatform, ClusterPlatformArgs

__all__ = ["ClusterPlatform", "ClusterPlatformArgs"]
