"""Guides (``guide=`` config group): rollouts that start from text the policy did not sample.

- ``none`` (:class:`~mintrl.guide.base.NoGuide`): no guided rollouts.
- ``prefix`` (:class:`~mintrl.guide.prefix.PrefixGuide`): a rollout starts from the first fraction
  ``p`` of the prompt's reference solution and the policy continues (BREAD, Prefix-RFT, QuestA).
- ``demonstration`` (:class:`~mintrl.guide.demonstration.DemonstrationGuide`): a whole off-policy
  trace joins its prompt's group (LUFFY's mixed-in demonstrations).

Guide tokens carry :attr:`mintrl.core.batch.Provenance.GUIDE`; the objective decides their
credit (:attr:`mintrl.objective.base.Objective.trains_guide_tokens`).
"""
