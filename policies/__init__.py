"""inferstack's policy pack (imported as `inferstack.policies`): rules over what the program registers.

`rules.POLICIES` is the pack; `__main__.py` serves it to the Pulumi CLI and `inferstack check`
runs it offline.
"""
