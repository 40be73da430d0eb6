"""Every rule a value must follow, written once, for the classes the values configure and the commands:
each raises ConfigError (a kind of the model's InvalidModelConfig), one line naming the key and the fix."""

from __future__ import annotations

import functools
import math
import os
from pathlib import Path
from typing import Any

from src.model import checks
from src.model.checks import InvalidModelConfig, is_int, is_number


class ConfigError(InvalidModelConfig):
    """A value the schema's types allow but the run cannot use; the message names the key and the fix."""


class RunDirInUse(ConfigError):
    """Another live training holds the run directory: a sweep job refused so leaves its record alone."""


# The model's rules (src/model/checks.py), each raising a run's ConfigError.
refuse = functools.partial(checks.refuse, error=ConfigError)
unknown_key = functools.partial(checks.unknown_key, error=ConfigError)
positive_int = functools.partial(checks.positive_int, error=ConfigError)
non_negative_int = functools.partial(checks.non_negative_int, error=ConfigError)
choice = functools.partial(checks.choice, error=ConfigError)
sampling = functools.partial(checks.sampling, error=ConfigError)  # sample.* and the callbacks' settings


def one_line(err: BaseException) -> str:
    """An exception's message on one line, as `error: ...` prints it."""
    text = " ".join(str(err).split())
    return text or type(err).__name__


def of_type(key: str, value: Any, kinds: tuple[type, ...], optional: bool = False) -> None:
    """A value of one of the primitive types `kinds` (an int counts as a float), or None where allowed."""
    if value is None and optional:
        return
    tests = {float: is_number, int: is_int}
    if not any(tests.get(kind, lambda v, kind=kind: isinstance(v, kind))(value) for kind in kinds):
        refuse(key, value, f"{'null or ' if optional else ''}of type {' or '.join(k.__name__ for k in kinds)}")


def seed(key: str, value: Any, count: int = 1) -> None:
    """A seed torch's CPU generator keeps whole (its lower 32 bits only); generate's `count` samples
    use seed + i, which must all fit."""
    if not (is_int(value) and 0 <= value and value + count - 1 < 2**32):
        fix = f"sample i uses seed + i, so seed + {count - 1} must be below 2**32 too" if count > 1 else ""
        refuse(key, value, "an integer in [0, 2**32)", fix)


def finite(key: str, value: Any, low: float, must: str, strict: bool = False) -> None:
    """A finite number above `low` (strict) or at least `low`."""
    if not (is_number(value) and math.isfinite(value) and (value > low if strict else value >= low)):
        refuse(key, value, must)


# ---------------------------------------------------------------------------- the data


def window_fits(split: str, length: int, T: int, text: tuple[str, int] | None = None) -> None:
    """A split must hold one window: T characters and the next one as the target of the last.
    text: (path, characters) of the whole text, to say "use a longer text" when no fraction can help."""
    if length >= T + 1:
        return
    if text is not None and text[1] < 4 * (T + 1):
        raise ConfigError(
            f"data.path={text[0]} has only {text[1]} characters: a run needs windows of "
            f"model.context_window + 1 = {T + 1} characters in each split; use a longer text"
        )
    fraction = "data.test_fraction" if split == "test" else "data.val_fraction"
    raise ConfigError(
        f"context_window ({T}) needs windows of {T + 1} characters (its inputs and the character after them), "
        f"more than the {split} split's {length}: lower model.context_window or give the {split} split more "
        f"text ({fraction})"
    )


def val_tokens(value: Any, T: int, key: str = "data.val_tokens") -> None:
    """The scored span of a split must hold at least one window."""
    if value is None:
        return
    positive_int(key, value, "or null to score the whole split")
    if value <= T:
        raise ConfigError(
            f"{key} ({value}) must exceed model.context_window ({T}) to hold one validation window: "
            f"raise it, or set {key}=null to score the whole split"
        )


# What validation logs (src/training/gpt_module.py), so what a checkpoint callback can monitor.
VAL_METRICS = ("val/loss", "val/ppl", "val/bpc", "val/acc")


# ---------------------------------------------------------------------------- sampling


# A sample keeps every id it drew: the ids, their steps and the text come to ~100 bytes per token.
BYTES_PER_SAMPLED_TOKEN = 100


def physical_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def sample_fits(key: str, max_new_tokens: int, num_samples: int = 1) -> None:
    """A sample longer than memory can hold is refused with the estimate, not allocated and crashed."""
    needed, available = max_new_tokens * num_samples * BYTES_PER_SAMPLED_TOKEN, physical_memory()
    if needed > available:
        times = f" x num_samples={num_samples}" if num_samples > 1 else ""
        raise ConfigError(
            f"{key}={max_new_tokens}{times} would hold about {needed / 2**30:,.0f} GiB of sampled text, more than "
            f"this machine's {available / 2**30:,.0f} GiB: ask for fewer tokens"
        )


def utf8_text(key: str, value: str) -> None:
    """A typed text the terminal sent with a byte that is not UTF-8 (Python keeps it as \\udcXX): named by
    its position, not left to fail where the text is first encoded."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ConfigError(
            f"{key} has a byte that is not UTF-8 text at character {err.start + 1} ({value[err.start]!r}): "
            f"type the {key} in UTF-8"
        ) from None


def output_file(out: Path, kind: bytes, example: str) -> None:
    """Refuse an out= a command cannot or must not write, before any work: a folder, a missing folder, an
    unwritable place, or an existing file that is not an earlier output of the same kind (its first bytes,
    `kind`): a command never writes over its input, a checkpoint, or anything else it did not make."""
    if out.is_dir():
        raise ConfigError(f"out={out} is a folder: give a file name, e.g. out={out / example}")
    if not out.parent.is_dir():
        raise ConfigError(f"cannot write out={out}: the folder {out.parent} does not exist")
    if out.is_file() and out.stat().st_size > 0:
        with out.open("rb") as existing:
            if existing.read(len(kind)).lower() != kind.lower():
                raise ConfigError(
                    f"out={out} is an existing file this command did not write (a checkpoint, a text?), which it "
                    f"would replace: choose a new file, e.g. out={out.with_name(example)}"
                )
    probe = out.with_name(f".{out.name}.probe-{os.getpid()}")
    try:
        probe.touch()
        probe.unlink()
    except OSError as err:
        raise ConfigError(f"cannot write out={out}: {err.strerror}; choose another out=") from None
