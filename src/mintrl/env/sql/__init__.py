"""``env=sql``: SQL tasks on a private in-memory SQLite table per episode.

Modules: :mod:`~mintrl.env.sql.tasks` (the task dict, the generator, the instruction),
:mod:`~mintrl.env.sql.loader` (AgentBench DB-bench files), :mod:`~mintrl.env.sql.database` (the
contained database), :mod:`~mintrl.env.sql.protocol` (reading actions, comparing answers),
:mod:`~mintrl.env.sql.environment` (:class:`SqlEnvironment`), :mod:`~mintrl.env.sql.source`
(:class:`SqlTasks`, the prompt source).
"""
