"""A sweep of training runs (docs/sweeps.md), loaded only by a multirun, a module per phase.

The points checked before it starts in checks.py; a job's side in job.py; the machine shared among
parallel jobs in resources.py; the main process's start and summary in summary.py, reached through
the Hydra callback of callback.py (the one module a single run loads); the parallel launcher in
launcher.py; after the sweep, analysis.py and figure.py. What a single run records (result.json,
its run name, its exit status) lives in src/run/record.py, its folder under torchrun and SLURM in
src/run/rundir.py.
"""
