"""The model's tests stand alone as the model does: collecting them (their modules, the conftest above
them, the helpers they import) loads neither Lightning nor Hydra, so `pytest tests/model` takes seconds."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_collecting_the_model_tests_imports_neither_lightning_nor_hydra():
    probe = (
        "import json, sys, pytest; "
        "code = pytest.main(['tests/model', '--collect-only', '-q', '-n', '0', '-p', 'no:cacheprovider']); "
        "heavy = ('lightning', 'hydra', 'omegaconf', 'torchmetrics'); "
        "print(json.dumps([int(code), sorted({m.split('.')[0] for m in sys.modules} & set(heavy))]))"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300)
    code, loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert code == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert loaded == [], f"collecting tests/model imported {loaded}"
