"""The Hydra callback every training run instantiates (conf/hydra/default.yaml): nothing in a single
run; a multirun's main process hands its start and end to src/sweeps/summary.py, loaded only then."""

from __future__ import annotations

from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class SweepSummary(Callback):
    """A multirun's main process: stops on SIGINT or SIGTERM between jobs, and at the end writes the
    table of all jobs (printed and in summary.md) and a plot."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from src.sweeps.summary import start

        start(config)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from src.sweeps.summary import finish

        finish(config)
