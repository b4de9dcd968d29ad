"""Metrics shared by training and evaluation: the unbiased pass@k (:mod:`~mintrl.metrics.pass_at_k`)."""
