"""A sweep of training runs (docs/sweeps.md), loaded only by a multirun: checks.py before it starts, job.py
for each job, resources.py for the machine parallel jobs share, launcher.py for hydra/launcher=parallel,
summary.py (through callback.py, the one module a single run loads), analysis.py and figure.py at its end."""
