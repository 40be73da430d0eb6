"""A multirun's command line, points and names: the sweeper's keys checked, a search space as overrides, the
jobs it launches, the keys it varies, and each job's run name (every command's multirun reads these)."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from src.rules import ConfigError, positive_int
from src.run import record
from src.run.record import NOT_HYPERPARAMETERS


def swept_keys(hydra_cfg: DictConfig) -> set[str]:
    """The keys this sweep varies: sweep syntax on the command line, or the sweeper's search space."""
    params = hydra_cfg.sweeper.get("params")
    keys = set(params.keys()) if params else set()
    sweep_file = Path(hydra_cfg.sweep.dir) / "multirun.yaml"
    if sweep_file.is_file():
        keys |= swept_on_command_line(str(sweep_file), sweep_file.stat().st_mtime_ns)
    return keys


@functools.cache
def swept_on_command_line(sweep_file: str, modified_ns: int) -> frozenset[str]:
    """The keys given sweep syntax in multirun.yaml's command line, read once per sweep (BENCHMARKS.md, "Sweeps")."""
    original = OmegaConf.load(sweep_file).hydra.overrides.task
    overrides = OverridesParser.create().parse_overrides(list(original))
    return frozenset(o.get_key_element() for o in overrides if o.is_sweep_override())


def name_of(overrides: Sequence[str], swept: set[str] | frozenset[str]) -> str:
    """A job's run name from its overrides: the swept ones (or all that set hyperparameters), short keys."""
    overrides = [o for o in overrides if not o.startswith(NOT_HYPERPARAMETERS)]
    chosen = [o for o in overrides if o.split("=", 1)[0] in swept] or overrides
    return ",".join(o.split("=", 1)[0].rsplit(".", 1)[-1] + "=" + shown(o.split("=", 1)[1]) for o in chosen)


def shown(value: str) -> str:
    """A value as short as it is exact: Hydra writes a swept 5e11 as 500000000000.0; `:g` gives 5e+11."""
    try:
        short = f"{float(value):g}"
    except ValueError:
        return value
    return short if len(short) < len(value) and float(short) == float(value) else value


def sweep_points(overrides: list[str]) -> list[list[str]]:
    """Every combination a basic multirun would launch (`a=1,2 b=3,4` gives four), in its order; a key
    given twice takes the later value, at its first place. An interval is one point, at its low end."""
    choices: dict[str, list[str]] = {}
    for o in OverridesParser.create().parse_overrides(overrides):
        try:
            values = o.sweep_string_iterator() if o.is_sweep_override() else [o.get_value_element_as_str()]
            choices[o.get_key_element()] = [f"{o.get_key_element()}={v}" for v in values]  # as a job's overrides
        except HydraException:  # an Optuna interval, whose values the sweeper draws: its low end stands for them
            choices[o.get_key_element()] = [f"{o.get_key_element()}={o.value().start!r}"]
    return [list(point) for point in itertools.product(*choices.values())]


def run_name() -> str:
    """What distinguishes this sweep job in TensorBoard and its record: `num_heads=4,embedding_dim=128`."""
    return name_of(record.job_overrides(), swept_keys(HydraConfig.get()))


def write_result(output_dir: str | Path, result: dict[str, Any]) -> None:
    """This job's record, with its overrides and run name."""
    record.write_result(output_dir, {"run_name": run_name(), **result})


def check_sweeper_keys(overrides: list[str]) -> None:
    """The sweeper's own counts, which no schema types (n_trials=0 was a traceback from Optuna)."""
    for override in overrides:
        key, _, value = override.partition("=")
        if key == "hydra.sweeper.n_trials":
            parsed = OverridesParser.create().parse_overrides([override])[0].value() if value else value
            positive_int(key, parsed, "how many trials the search runs")
        if key.lstrip("+") == "hydra.sweeper.n_jobs":  # Hydra's own Optuna sweeper had it
            raise ConfigError(
                "hydra.sweeper.n_jobs is gone: trials in parallel are workers, each a process given the same "
                "hydra.sweeper.storage (docs/scaling.md, 'Searches across machines')"
            )


SEARCH_SPACE = "hydra.sweeper.params."


def search_space_as_overrides(argv: list[str]) -> list[str]:
    """`hydra.sweeper.params.model.num_heads=choice(3,5)` as the override `model.num_heads=choice(3,5)`,
    which Hydra takes on the command line; an override typed for the same key wins, as in the sweepers."""
    spaces = [a.lstrip("+").startswith(SEARCH_SPACE) for a in argv]
    typed = {a.split("=", 1)[0].lstrip("+~") for a, space in zip(argv, spaces, strict=True) if not space}
    return [
        a.lstrip("+")[len(SEARCH_SPACE) :] if space else a
        for a, space in zip(argv, spaces, strict=True)
        if not space or a.lstrip("+")[len(SEARCH_SPACE) :].split("=", 1)[0] not in typed
    ]
