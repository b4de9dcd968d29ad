"""``env=python_tool``: math tasks where the agent may run Python in the code sandbox before it
answers.

Modules: :mod:`~mintrl.env.python_tool.protocol` (reading actions, the texts the agent sees),
:mod:`~mintrl.env.python_tool.program` (one call as a sandbox program, state rebuilt from the
earlier cells), :mod:`~mintrl.env.python_tool.environment` (:class:`PythonToolEnvironment`),
:mod:`~mintrl.env.python_tool.source` (:class:`PythonToolPrompts`, the prompt source).
"""
