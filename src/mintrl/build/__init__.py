"""The composition root: a composed Hydra config in, a run's wired components out
(:func:`~mintrl.build.components.build_components`), the configs' folder and resolvers
(:mod:`~mintrl.build.config`), the cross-field config checks (:mod:`~mintrl.build.config_checks`) and the
training job (:func:`~mintrl.build.run.run`). Above training and the SFT stage, below the entry points."""
