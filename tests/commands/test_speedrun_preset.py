"""experiment=cpu_speedrun_modern end to end, cut short: bfloat16 autocast and Muon's bfloat16
iterations train on a CPU, and the float32 evaluation of its checkpoint agrees with the run's own
val loss (the speedrun's 1.88 is read under autocast)."""

import json
import re

import pytest

from tests.helpers import run_main

# Few steps of a small batch: where the CPU lacks bfloat16 instructions (AVX2 only) PyTorch emulates
# them, and a step of this preset, most of it Muon's bfloat16 iterations, takes seconds, not 50 ms.
STEPS = 12


@pytest.mark.slow
def test_the_modern_speedrun_trains_in_bfloat16_and_its_loss_holds_in_float32(tmp_path):
    run = tmp_path / "run"
    result = run_main(
        "train",
        "experiment=cpu_speedrun_modern",
        f"paths.log_dir={tmp_path}",
        f"hydra.run.dir={run}",
        f"trainer.max_steps={STEPS}",
        f"trainer.val_check_interval={STEPS}",
        "data.val_tokens=4096",
        "data.batch_size=8",
        "trainer.accelerator=cpu",
        "explorer=false",
        "progress_bar=false",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run_result = json.loads((run / "result.json").read_text())
    assert run_result["steps"] == STEPS and run_result["best_val_loss"] < 3.7  # from ln 65 = 4.17 (3.42 seen)
    config = (run / ".hydra" / "config.yaml").read_text()
    assert "precision: bf16-mixed" in config and "ns_dtype: bfloat16" in config and "num_kv_heads: 1" in config
    evaluated = run_main("evaluate", f"ckpt_path={run / 'checkpoints' / 'best.ckpt'}", "val_tokens=4096")
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    float32_loss = float(re.search(r"^val +([0-9.]+)", evaluated.stdout, re.M).group(1))
    assert abs(float32_loss - run_result["best_val_loss"]) < 5e-3, (float32_loss, run_result["best_val_loss"])
