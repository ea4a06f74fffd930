"""The AWS side of the platform, built from pulumi_aws resources only (so the mock engine sees every child).

`AwsFoundation` is the entry point: network, EKS cluster (or an existing one), one `GpuNodePool`
per spec pool, and the model weights store with its Pod Identity reader role. Every figure (node group sizes,
what a node advertises) comes from `inferstack.planning`; the layer never imports the engine or the
presentation (tests/test_layout.py).
"""
