"""src/model/ stands alone: a learner can copy it into a notebook with torch and nothing else."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_importing_the_model_loads_no_other_part_of_the_project():
    probe = (
        "import json, sys; import src.model, src.model.generation, src.model.checks; "
        "tops = ('src', 'lightning', 'hydra', 'omegaconf'); "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in tops)))"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout)
    assert "src.model.gpt" in loaded
    assert all(m == "src" or m.startswith("src.model") for m in loaded), loaded


def test_a_model_limit_is_a_value_error_naming_the_key():
    from src.model import GPTConfig
    from src.model.checks import InvalidModelConfig

    assert issubclass(InvalidModelConfig, ValueError)
    with pytest.raises(InvalidModelConfig, match=r"^embedding_dim \(30\) must be divisible by num_heads \(4\)"):
        GPTConfig(vocab_size=10, embedding_dim=30, num_heads=4)
    with pytest.raises(InvalidModelConfig, match=r"^model.dropout must be in \[0, 1\), got 1.5$"):
        GPTConfig(vocab_size=10, dropout=1.5)
