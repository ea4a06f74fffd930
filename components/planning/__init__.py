"""Capacity planning: what the platform needs and yields, as pure functions over the spec and the catalog.

One module a question: what a checkpoint runs as (quantization), what fits a device (sizing, fit_refusal),
a pool's node groups and what a node offers (node_groups, pool_capacity), what it costs (cost), where
services go (auto_placement; the free-form planner in demand, placement_problem, mig_packing, placement and
placement_yardsticks), what a replica serves (engine_step, load, service_performance, accuracy, calibrate),
how long until it serves (creation_times, dependency_rule, serving_time) and how it updates (rollout).

Planning imports `inferstack.spec`, `inferstack.catalog` and the modules beside it; never Pulumi, the engine,
the layers (aws, platform, serving, weights) or the presentation (tests/test_layout.py), so the layers,
`check` and the plan read the same figures from the same functions.
"""
