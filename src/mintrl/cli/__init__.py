"""Console scripts (``[project.scripts]``): thin argument glue over the library.

``mintrl-train`` (:mod:`mintrl.cli.train`), ``mintrl-eval``, ``mintrl-pilot``, ``mintrl-serve``,
``mintrl-summary``, ``mintrl-keywords``. The Hydra entry points read their configs from
:data:`mintrl.build.config.CONFIG_DIR`.
"""
