"""What every command-line entry point shares: where the project lives, and one-line errors.

Bad input raises a ValueError (or OSError) whose message names the fix. Here it becomes
`error: <message>` on stderr and exit status 2, not a stack trace. HYDRA_FULL_ERROR=1 shows the
full trace, as it does for Hydra's own errors.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hydra
from lightning.fabric.utilities.exceptions import MisconfigurationException
from omegaconf import DictConfig

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = PROJECT_ROOT / "conf"
USER_ERRORS = (ValueError, OSError, MisconfigurationException)

# Known, harmless warnings of the pinned libraries, silenced here and nowhere else.
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")  # Lightning 2.6 on torch 2.13
# Lightning suggests worker processes for the validation loader; its batches are slices of one
# in-memory tensor, which workers would only slow down.
warnings.filterwarnings("ignore", message=".*does not have many workers.*")
# Resuming a run writes into its checkpoint directory on purpose.
warnings.filterwarnings("ignore", message="Checkpoint directory .* exists and is not empty")


def one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text or type(err).__name__


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def compose(config_name: str, overrides: list[str]) -> DictConfig:
    """The config a command line would give, without running anything (hydra.* keys unavailable)."""
    os.environ.setdefault("PROJECT_ROOT", str(PROJECT_ROOT))
    with hydra.initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return hydra.compose(config_name=config_name, overrides=overrides)


def hydra_entry(
    config_name: str, rewrite_argv: Callable[[list[str]], list[str]] | None = None
) -> Callable[[Callable[[DictConfig], Any]], Callable[[], Any]]:
    """Turn task(cfg) into a Hydra command reading conf/<config_name>.yaml.

    rewrite_argv may adjust the command-line overrides before Hydra reads them.
    """

    def decorate(task: Callable[[DictConfig], Any]) -> Callable[[], Any]:
        @functools.wraps(task)
        def guarded(cfg: DictConfig) -> Any:
            try:
                return task(cfg)
            except USER_ERRORS as err:
                if os.environ.get("HYDRA_FULL_ERROR") == "1":
                    raise
                fail(one_line(err))

        hydra_main = hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name=config_name)(guarded)

        @functools.wraps(task)
        def main() -> Any:
            os.environ.setdefault("PROJECT_ROOT", str(PROJECT_ROOT))
            if rewrite_argv is not None:
                sys.argv[1:] = rewrite_argv(sys.argv[1:])
            return hydra_main()

        return main

    return decorate
