"""Evaluation of a policy: :func:`~mintrl.eval.evaluate.evaluate` (pass@k of a checkpoint on a benchmark) and the
judge pilot (:mod:`mintrl.eval.pilot`). Reports on finished runs are :mod:`mintrl.analysis`; no command-line code
here (that is :mod:`mintrl.cli`)."""
