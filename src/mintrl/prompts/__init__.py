"""The shipped prompt templates (``*.txt``: judge, intervention, privileged note, per domain) and
their loader, :func:`mintrl.prompts.templates.load_prompt`."""
