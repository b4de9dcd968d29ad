"""Reports on finished runs: reading multirun folders and their jobs, statistics over seeds, plots, and the rendered reports (no training code: nothing here imports a model)."""
