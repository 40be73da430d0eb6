"""`SCRATCHGPT_EXERCISES=attention python -m src.exercises.run [overrides]`: `python -m src.train` with the
learner's pieces of the notes swapped in for the reference's before anything is built (docs/learn.md).

The training run itself knows nothing of exercises: this wing swaps the pieces, then runs the command.
"""

from __future__ import annotations

import sys

from hydra.errors import HydraException

from src.exercises import use_selected
from src.run.cli import compose, fail


def main() -> None:
    try:
        fused = bool(compose("train", [a for a in sys.argv[1:] if not a.startswith("-")]).model.fused)
    except (HydraException, ValueError):
        fused = False  # the command line is wrong: src.train says how, in one line
    try:
        use_selected(fused)
    except ValueError as err:
        fail(str(err))
    from src.train import main as train

    train()


if __name__ == "__main__":
    main()
