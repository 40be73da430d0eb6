"""A NaN loss says whether a good checkpoint is on disk.

Issue 37 item 19: a NaN at step 4, before any save, said "the checkpoints on disk are the last good
ones" (there were none).
"""

import pytest

from src.training.gpt_module import NonFiniteLossError
from tests.helpers import train_in_process

NAN_AT = ("+callbacks.nan._target_=tests.helpers.NaNOnRank", "+callbacks.nan.rank=0")
QUIET = ("callbacks.sample_text=null", "callbacks.attention_maps=null", "sample.max_new_tokens=0")


@pytest.mark.parametrize(
    "interval,said",
    [(10, "and no checkpoint was written before it"), (2, "so the checkpoints on disk are the last good ones")],
)
def test_a_nan_names_the_checkpoints_only_when_there_are_some(tmp_path, interval, said):
    with pytest.raises(NonFiniteLossError, match=rf"at step 3: stopped without saving, {said}; lower optimizer\.lr"):
        train_in_process(
            tmp_path / "run",
            "trainer.max_steps=10",
            f"trainer.val_check_interval={interval}",
            *NAN_AT,
            "+callbacks.nan.step=3",
            *QUIET,
        )
