"""jinja2 templates (StrictUndefined) the components render: user data, scripts, configs, the plan page."""
