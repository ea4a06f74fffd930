"""inferstack's policy pack (imported as `inferstack.policies`): rules over what the program registers.

`rules.POLICIES` is the pack; `__main__.py` serves it to the Pulumi CLI, and `runner.py` runs it offline for
`inferstack check` and the plan, over a render or the embedded engine's recording. The rules run inside Pulumi's
analyzer, so they import the catalog, the spec's constants and `inferstack.planning` for their figures, never the
engine or the presentation (tests/test_layout.py); only runner.py drives the engine's recorder.
"""
