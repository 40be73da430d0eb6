"""A real PostgreSQL for the shared Optuna searches (tests/sweeps/test_search_workers.py), started once."""

import os
import subprocess

import pytest

from tests.helpers import ROOT


@pytest.fixture(scope="session")
def postgres_url():
    """scripts/postgres.sh's server in its own folder (under /tmp: the `postgres` user cannot enter pytest's
    folders), stopped at the end. Under CI=true one that does not start fails the tests."""
    env = {**os.environ, "POSTGRES_DIR": f"/tmp/scratchgpt-postgres-test-{os.getpid()}"}
    script = str(ROOT / "scripts" / "postgres.sh")
    started = subprocess.run([script, "up"], capture_output=True, text=True, env=env, timeout=600)
    if started.returncode != 0:
        reason = f"PostgreSQL did not start ({' '.join(started.stderr.split())[-300:]}); `make postgres-up` shows why"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    yield started.stdout.split()[-1]
    subprocess.run([script, "down"], env=env, check=True, timeout=60)
