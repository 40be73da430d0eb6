"""The commands load Lightning without scipy.signal (src/training/lightning_import.py), and
scipy.signal still loads for whoever asks for it afterwards."""

import subprocess
import sys

import pytest

from tests.helpers import ROOT


def modules_after(code: str) -> set[str]:
    """The modules loaded after running `code` in a fresh interpreter."""
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys; print(' '.join(sys.modules))"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


@pytest.mark.slow
def test_torchmetrics_alone_still_imports_scipy_signal():
    """Why the shim exists. When this fails, torchmetrics no longer loads scipy.signal: delete the shim."""
    assert "scipy.signal" in modules_after("import torchmetrics")


@pytest.mark.slow
@pytest.mark.parametrize("command", ["src.train", "src.evaluate", "src.explore"])
def test_the_commands_load_lightning_and_torchmetrics_but_not_scipy_signal(command):
    loaded = modules_after(f"import {command}")
    assert {"lightning", "torchmetrics"} <= loaded
    assert "scipy.signal" not in loaded


@pytest.mark.slow
def test_scipy_signal_loads_for_real_afterwards():
    code = (
        "import src.train, scipy.signal\n"
        "assert scipy.signal.windows.hann(3).tolist() == [0.0, 1.0, 0.0]\n"
        "assert scipy.signal.__file__.endswith('__init__.py')\n"
        "import torchmetrics; torchmetrics.MeanMetric()"
    )
    assert "scipy.signal" in modules_after(code)
