"""Model weights: get them from S3 onto the node's local NVMe before vLLM starts.

The scripts are rendered from templates/; the cache budget they enforce comes from `inferstack.planning`.
"""
