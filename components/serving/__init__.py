"""The serving layer: vLLM model services, the inference gateway, KEDA scalers, queue-fed workers, batch jobs.

Requests, replicas, load times and rollout room come from `inferstack.planning`; names.py and transport.py are
pure and read by the plan too. The layer never imports the engine or the presentation (tests/test_layout.py).
"""
