"""Reports on finished runs: reading multirun folders and their jobs, statistics over seeds, plots, and the
rendered reports (no training code: nothing here imports a model).

Modules, by concern (each imports only those listed before it):

* :mod:`~mintrl.analysis.stats`: Student t intervals over seeds, paired differences, verdicts, seeds needed;
* :mod:`~mintrl.analysis.tensorboard`: the scalars a run logged (TensorBoard event files);
* :mod:`~mintrl.analysis.runs`: multirun folders, jobs, overrides, seeds, the no-intervention baseline, run
  manifests and wall times;
* :mod:`~mintrl.analysis.measures`: one run's numbers (held-out pass@1, off-policy fraction, entropy, budget);
* :mod:`~mintrl.analysis.summary`: the ``mintrl-summary`` rows, per job and per setting over seeds;
* :mod:`~mintrl.analysis.rows`: the reproduction's rows, named as the paper names its methods;
* :mod:`~mintrl.analysis.tables`: markdown tables and the reproduction report's text;
* :mod:`~mintrl.analysis.claims`: the paper's claims and their measured verdicts;
* :mod:`~mintrl.analysis.plots`: the figures (matplotlib);
* :mod:`~mintrl.analysis.knob_effects`: main effects of a factorial sweep's knobs;
* :mod:`~mintrl.analysis.report_blocks`: the sections other writers own in a report file (the agents and the
  confirmation sections: found by their markers, replaced, kept);
* :mod:`~mintrl.analysis.report`: ``mintrl-reproduce``'s report, read, computed and written;
* :mod:`~mintrl.analysis.agent_stats`: Wilson, Spearman and Welch intervals, calibration bins (the agent
  comparison);
* :mod:`~mintrl.analysis.agent_rows`: the agent rows' jobs, levels, measures and allocation decisions;
* :mod:`~mintrl.analysis.agent_claims`: RAIL's claims R1-R4 and their verdicts;
* :mod:`~mintrl.analysis.agent_tables`, :mod:`~mintrl.analysis.agent_plots`: the agents section's text and figure;
* :mod:`~mintrl.analysis.agent_report`: ``mintrl-reproduce-agents``' section, read, computed and written;
* :mod:`~mintrl.analysis.confirm`: the claims at seeds fixed in advance in the confirmation sweep files (plan,
  finished jobs, commits, verdicts);
* :mod:`~mintrl.analysis.confirm_report`: ``mintrl-reproduce-confirm``'s section, rendered and written;
* :mod:`~mintrl.analysis.rollouts`: the rollout records viewer (``mintrl-rollouts``);
* :mod:`~mintrl.analysis.keywords`: the keyword shift between two evaluations (``mintrl-keywords``).
"""
