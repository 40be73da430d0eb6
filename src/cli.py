"""What every command-line entry point shares: where the project lives, and one-line errors.

Bad input raises a ValueError (or OSError) whose message names the fix. Here it becomes
`error: <message>` on stderr and exit status 2, not a stack trace. Before Hydra starts (and
creates a run directory) the command line is composed once, so a wrong key or option, or a
config the pre-check refuses, ends with nothing written. HYDRA_FULL_ERROR=1 shows full traces.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = PROJECT_ROOT / "conf"
USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, OSError)

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


def fail(message: str, status: int = 2) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(status)


def compose(config_name: str, overrides: list[str]) -> DictConfig:
    """The config a command line would give, without running anything (hydra.* keys unavailable)."""
    os.environ.setdefault("PROJECT_ROOT", str(PROJECT_ROOT))
    with hydra.initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return hydra.compose(config_name=config_name, overrides=overrides)


def first_point(overrides: list[str]) -> list[str]:
    """A sweep's first combination (`a=1,2` -> `a=1`), to check a multirun's keys before it starts."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    return [
        f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}" if o.is_sweep_override() else o.input_line
        for o in parsed
    ]


def explain(err: HydraException, config_name: str, overrides: list[str]) -> str:
    """Hydra's multi-line composition errors, as one line that names the fix."""
    text = str(err)
    missing = re.search(r"Could not find '([^']+)/([^']+)'", text)
    if missing:
        group, option = missing.groups()
        choices = sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))
        return f"unknown option '{option}' for {group}: choose one of {', '.join(choices)}"
    unknown = re.search(r"Could not override '([^']+)'", text) or re.search(r"Key '([^']+)' is not in struct", text)
    if unknown:
        key = unknown.group(1)
        parent, _, _ = key.rpartition(".")
        known = ""
        try:
            node = OmegaConf.select(compose(config_name, []), parent) if parent else compose(config_name, [])
            if isinstance(node, DictConfig):
                known = f"; {parent or 'the config'} has: {', '.join(str(k) for k in node.keys())}"
        except HydraException:
            pass
        return f"unknown config key '{key}': check its spelling{known}"
    if "mismatched input" in text or "no viable alternative" in text or "extraneous input" in text:
        return (
            f"cannot parse the overrides {' '.join(overrides)}: quote values with spaces, commas or "
            f"special characters, e.g. \"prompt='O Romeo, Romeo!'\""
        )
    return one_line(err)


Precheck = Callable[[DictConfig, list[str]], None]


def hydra_entry(
    config_name: str,
    rewrite_argv: Callable[[list[str]], list[str]] | None = None,
    precheck: Precheck | None = None,
    user_errors: tuple[type[BaseException], ...] = (),
) -> Callable[[Callable[[DictConfig], Any]], Callable[[], Any]]:
    """Turn task(cfg) into a Hydra command reading conf/<config_name>.yaml.

    rewrite_argv may adjust the command-line overrides before anything else reads them;
    precheck(cfg, argv) may refuse a single run's config before its run directory exists;
    user_errors are further exception types reported as one line (e.g. Lightning's).
    """
    errors = USER_ERRORS + user_errors

    def decorate(task: Callable[[DictConfig], Any]) -> Callable[[], Any]:
        @functools.wraps(task)
        def guarded(cfg: DictConfig) -> Any:
            try:
                return task(cfg)
            except errors as err:
                if os.environ.get("HYDRA_FULL_ERROR") == "1":
                    raise
                fail(one_line(err))

        hydra_main = hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name=config_name)(guarded)

        def check_before_running(argv: list[str]) -> None:
            multirun = any(a in ("-m", "--multirun") for a in argv)
            if any(a.startswith("-") and a not in ("-m", "--multirun") for a in argv):
                return  # --help, --cfg job, ...: Hydra's own flags, nothing runs
            overrides = [a for a in argv if not a.startswith("-")]
            try:
                cfg = compose(config_name, first_point(overrides) if multirun else overrides)
            except HydraException as err:
                fail(explain(err, config_name, overrides))
            if precheck is not None and not multirun:
                precheck(cfg, argv)

        @functools.wraps(task)
        def main() -> Any:
            os.environ.setdefault("PROJECT_ROOT", str(PROJECT_ROOT))
            if rewrite_argv is not None:
                sys.argv[1:] = rewrite_argv(sys.argv[1:])
            if os.environ.get("HYDRA_FULL_ERROR") != "1":
                try:
                    check_before_running(sys.argv[1:])
                except errors as err:
                    fail(one_line(err))
            try:
                return hydra_main()
            except KeyboardInterrupt:  # before training started, or a second Ctrl-C
                fail("interrupted; a run that had started training saved checkpoints/last.ckpt", status=130)

        return main

    return decorate
