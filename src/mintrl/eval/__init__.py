"""The evaluation library: the pass@k metric, :func:`~mintrl.eval.evaluate.evaluate` of a checkpoint
on a benchmark, the pilot table, keyword shift, the multirun summary and TensorBoard reading.
No command-line code (that is :mod:`mintrl.cli`)."""
