"""Where the tests' local SLURM cluster is kept track of (tests/cluster/conftest.py starts it, tests/conftest.py
stops it): the script, the lock one xdist worker starts it under, and the mark naming the session that started
it. Light on purpose: the root conftest imports it, and collecting tests/model must not load Lightning."""

import tempfile
from pathlib import Path

SLURM_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slurm.sh"
SLURM_LOCK = Path(tempfile.gettempdir()) / "scratchgpt-slurm-tests.lock"
SLURM_STARTED = Path(tempfile.gettempdir()) / "scratchgpt-slurm-tests.started"
