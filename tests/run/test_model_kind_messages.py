"""A model option of the other model gets the fix that applies to what was typed.

Issue 37 item 19: `model=seed +model.num_layers=2` suggested `model=seed`, which the user had typed.
"""

import pytest

from src.model.checks import InvalidModelConfig
from src.run.cli import compose
from src.run.preflight import check_values


@pytest.mark.parametrize(
    "typed,said",
    [
        (
            ["model=seed", "+model.num_layers=2"],
            r"model\.num_layers is an option of the gpt model, not of the seed model: "
            r"remove it, or choose model=gpt",
        ),
        (
            ["model.kind=seed"],
            r"model\.kind=seed keeps the options of the gpt model .*choose the model with model=seed",
        ),
    ],
)
def test_an_option_of_the_other_model_names_the_fix_for_what_was_typed(typed, said):
    with pytest.raises(InvalidModelConfig, match=said):
        check_values(compose("train", typed))
