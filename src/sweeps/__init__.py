"""A sweep of training runs (docs/sweeps.md): checks.py before it starts, job.py for each job, resources.py
for the machine parallel jobs share, launcher.py for hydra/launcher=parallel, search.py for an Optuna
search (hparams_search=optuna), summary.py, analysis.py and figure.py at its end. A single run loads only
this file, for the Hydra callback below."""

from __future__ import annotations

from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class SweepSummary(Callback):
    """Every run instantiates it (conf/hydra/default.yaml); it acts only in a multirun's main process:
    stops on SIGINT or SIGTERM between jobs, and at the end writes the table of all jobs (printed and in
    summary.md) and a plot."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from src.sweeps.summary import start

        start(config)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from src.sweeps.summary import finish

        finish(config)
