"""Capacity planning: what a model service needs and yields, as pure functions over the spec and the catalog.

Planning imports `inferstack.spec`, `inferstack.catalog` and the other pure modules beside it; never
Pulumi and never the engine, so the plan, `check` and the components read the same figures.
"""
