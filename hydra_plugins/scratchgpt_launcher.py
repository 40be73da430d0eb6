"""hydra/launcher=parallel (conf/hydra/launcher/parallel.yaml): Hydra's joblib launcher with a sweep's
faults contained; the launch itself is src/sweeps/launcher.py's launch_parallel.

Here because Hydra instantiates launchers from the `hydra_plugins` namespace package only (the
commands run from the project root, which puts this folder on it).
"""

from collections.abc import Sequence
from typing import Any

from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher


class ParallelLauncher(JoblibLauncher):
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Any:
        from src.sweeps.launcher import launch_parallel  # when a sweep starts: Hydra imports every plugin at start-up

        return launch_parallel(self, job_overrides, initial_job_idx)
