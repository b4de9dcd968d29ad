"""``env=shell``: questions about files answered by running commands in one persistent bash shell per
episode, inside the project's sandbox.

Modules: :mod:`~mintrl.env.shell.session` (:class:`ShellSession`, one sandboxed bash driven command
by command), :mod:`~mintrl.env.shell.tasks` (the task dict, the generator, the instruction),
:mod:`~mintrl.env.shell.loader` (AgentBench OS-interaction files), :mod:`~mintrl.env.shell.protocol`
(reading actions, answer checks), :mod:`~mintrl.env.shell.environment` (:class:`ShellEnvironment`),
:mod:`~mintrl.env.shell.source` (:class:`ShellTasks`, the prompt source).
"""
