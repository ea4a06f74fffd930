"""Model weights: get them from S3 onto the node's local NVMe before vLLM starts."""
