"""The bottom layer, imported by every package and importing none of them: the field checks
(:mod:`~mintrl.core.checks`), the rollout batch types and token origins (:mod:`~mintrl.core.batch`),
the judge's verdict types (:mod:`~mintrl.core.verdict`) and the run manifest
(:mod:`~mintrl.core.manifest`)."""
