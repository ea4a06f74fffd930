"""The serving layer: vLLM model services, the inference gateway, KEDA scalers, queue-fed workers, batch jobs."""
