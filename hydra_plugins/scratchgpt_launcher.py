"""hydra/launcher=parallel (conf/hydra/launcher/parallel.yaml): Hydra's joblib launcher with a sweep's
faults contained; the launch itself is src/sweeps/launcher.py's launch_parallel. hydra/launcher=slurm
(conf/hydra/launcher/slurm.yaml): Hydra's submitit launcher, its request checked (src/sweeps/slurm.py).

Here because Hydra instantiates launchers from the `hydra_plugins` namespace package only (the
commands run from the project root, which puts this folder on it).
"""

from collections.abc import Sequence
from typing import Any

from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher
from hydra_plugins.hydra_submitit_launcher import submitit_launcher


class ParallelLauncher(JoblibLauncher):
    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Any:
        from src.sweeps.launcher import launch_parallel  # when a sweep starts: Hydra imports every plugin at start-up

        return launch_parallel(self, job_overrides, initial_job_idx)


class SlurmLauncher(submitit_launcher.SlurmLauncher):
    """hydra/launcher=slurm (conf/hydra/launcher/slurm.yaml): Hydra's submitit launcher, its request
    checked against the partition's nodes before anything is written (src/sweeps/slurm.py)."""

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        from src.sweeps.slurm import check_request

        check_request(self.params)
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Any:
        from src.sweeps.slurm import sbatch_refusals

        with sbatch_refusals():
            return super().launch(job_overrides, initial_job_idx)
