"""The plan as people read it: the summary (plan.json), the terminal report, the HTML page and the diff of two renders.

It reads a recording from `inferstack.engine` and figures from `inferstack.planning`; nothing else imports it
but the CLI and the bench, so the components (aws, platform, serving) never depend on how a plan is shown.
"""
