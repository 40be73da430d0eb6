"""hydra/sweeper=optuna (conf/hydra/sweeper/optuna.yaml): an Optuna search whose study several workers may
share; the search itself is src/sweeps/search.py.

Here because Hydra instantiates sweepers from the `hydra_plugins` namespace package only (the commands
run from the project root, which puts this folder on it).
"""

from typing import Any

from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class OptunaSweeper(Sweeper):
    def __init__(self, **settings: Any) -> None:
        self.settings = settings  # conf/hydra/sweeper/optuna.yaml's keys, sampler and pruner instantiated

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            config=config, hydra_context=hydra_context, task_function=task_function
        )

    def sweep(self, arguments: list[str]) -> Any:
        from src.sweeps.search import search  # when a search starts: Hydra imports every plugin at start-up

        return search(self.config, self.launcher, self.settings, arguments)
