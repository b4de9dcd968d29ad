"""The training core: :class:`~mintrl.training.module.PolicyModule` (the LightningModule),
:func:`~mintrl.build.components.build_components` (wiring a composed config), config checks, the
configs' folder and resolvers, checkpoint IO, distributed strategies and the run's callbacks."""
