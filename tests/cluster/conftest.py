"""The one-node SLURM cluster of scripts/slurm.sh, started once for the tests that ask for `slurm`
(all marked slow: `make test-fast` never pays for it) and stopped at the session's end if they started it.
Under CI=true a cluster that cannot start fails them; elsewhere they skip, naming `make slurm-up`.

Under pytest-xdist each worker that gets a SLURM test asks for the cluster: a lock lets one start it
while the others wait and reuse it, and none stops it, since another worker may still be using it;
tests/conftest.py's pytest_sessionfinish stops it once every worker is done."""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
from collections.abc import Iterator

import pytest

from tests.cluster.local import SLURM_LOCK, SLURM_SCRIPT, SLURM_STARTED


@pytest.fixture(scope="session")
def slurm() -> Iterator[str]:
    """SLURM_CONF of the running cluster, set in this process's environment (and so in every command it starts)."""
    with open(SLURM_LOCK, "w") as lock:  # Python's files are not inherited: the daemons started never hold it
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            up = subprocess.run([str(SLURM_SCRIPT), "up"], capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.TimeoutExpired) as err:
            up = subprocess.CompletedProcess([str(SLURM_SCRIPT), "up"], 1, "", str(err))
        if up.returncode == 0 and "reusing the running cluster" not in up.stderr:
            # this session started it: its end stops it. The session is xdist's controller (this worker's
            # parent) or this process: not a pytest run inside a test (a collection probe), whose end is not ours.
            SLURM_STARTED.write_text(str(os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid()))
    conf = re.search(r"^export SLURM_CONF=(\S+)$", up.stdout, re.MULTILINE)
    if up.returncode != 0 or conf is None:
        why = f"the local SLURM cluster did not start (scripts/slurm.sh up: {up.stderr.strip()[-2000:]})"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(f"{why}: start it with make slurm-up")
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = conf.group(1)
    yield conf.group(1)
    if before is None:
        del os.environ["SLURM_CONF"]
    else:
        os.environ["SLURM_CONF"] = before
