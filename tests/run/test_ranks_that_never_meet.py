"""Ranks that could never meet are refused up front in one line, not waited for forever.

Issue 37 item 7: `python -m src.train trainer=ddp_cpu trainer.devices=2` with SLURM's variables but
without srun (an sbatch script that forgot it) waited forever for a rank nobody started; SIGTERM and
SIGINT were caught but never acted on, only kill -9 ended it.
"""

import pytest

from src.cluster import meeting
from src.run.rundir import launched_run

JOB = {"SLURM_JOB_ID": "1", "SLURM_NTASKS": "2", "SLURM_PROCID": "0", "SLURM_JOB_NAME": "train"}


@pytest.mark.parametrize(
    "env,refused",
    [
        ({}, True),  # sbatch's script: no step
        ({"SLURM_STEP_ID": "4294967294"}, True),  # the batch step's own id
        ({"SLURM_STEP_ID": "0"}, False),  # srun's task
        ({"SLURM_NTASKS": "1"}, False),  # one task: nothing to wait for
        ({"SLURM_JOB_NAME": "interactive"}, False),  # Lightning's opt-out of SLURM
    ],
)
def test_slurm_tasks_that_srun_did_not_start_are_refused(monkeypatch, env, refused):
    for key in ("SLURM_STEP_ID", "SLURM_STEPID", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(key, raising=False)
    for key, value in {**JOB, **env}.items():
        monkeypatch.setenv(key, value)
    if refused:
        with pytest.raises(ValueError, match=r"SLURM promises 2 tasks .* srun did not start this process.*srun python"):
            meeting.check_launched_run(launched_run(), run_dir_typed=False)
    else:
        meeting.check_launched_run(launched_run(), run_dir_typed=False)
