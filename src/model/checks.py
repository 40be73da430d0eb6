"""The limits of the models' settings, written once: the configs, the attention and the sampler check
their values here, and src/rules.py reuses these rules (with its own error class) for a run's other
keys, so a limit and its message never differ between the early check of a command line and the model.
Each rule raises InvalidModelConfig (a ValueError): one line naming the key and the fix."""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence
from dataclasses import field
from typing import Any, NoReturn


def setting(default: Any, line: str) -> Any:
    """A config's field: its default and the one line `--help` prints for it (src/run/config.py reads it)."""
    return field(default=default, metadata={"help": line})


class InvalidModelConfig(ValueError):
    """A value the model cannot use; the message names the key and the fix."""


Error = type[ValueError]


def refuse(key: str, value: Any, must: str, fix: str = "", error: Error = InvalidModelConfig) -> NoReturn:
    raise error(f"{key} must be {must}, got {value!r}" + (f": {fix}" if fix else ""))


def unknown_key_message(key: str, owner: str, options: Sequence[str], elsewhere: Sequence[str] = ()) -> str:
    """The one wording of "nothing reads this key", wherever a key is checked (the model, the optimizer, the
    config's own keys, a class a config instantiates, Hydra's misspelt keys: src/run/cli.py passes every key
    as `elsewhere`). A near spelling among the owner's options, or the same last name elsewhere, is offered."""
    parent, _, name = key.rpartition(".")
    own = [f"{parent}.{o}" if parent else str(o) for o in difflib.get_close_matches(name, options, n=1, cutoff=0.8)]
    others = [k for k in elsewhere if k.rpartition(".")[0] != parent]  # a misspelt parent: modle.num_heads
    close = own or difflib.get_close_matches(key, others, n=1, cutoff=0.85)
    close = close or [k for k in others if k.rpartition(".")[2] == name][:1]  # data.context_window
    hint = f"did you mean {close[0]}? " if close else ""
    if not options:
        return f"unknown config key '{key}': {hint or 'check its spelling'}".rstrip()
    return f"unknown config key '{key}': {hint}{owner} has: {', '.join(str(o) for o in options)}"


def unknown_key(key: str, owner: str, options: Sequence[str], error: Error = InvalidModelConfig) -> NoReturn:
    """Refuse a key that nothing reads (`+model.foo=1`), in the one wording above."""
    raise error(unknown_key_message(key, owner, options))


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def positive_int(key: str, value: Any, fix: str = "", error: Error = InvalidModelConfig) -> None:
    if not is_int(value) or value < 1:
        refuse(key, value, "a positive integer", fix, error)


def non_negative_int(key: str, value: Any, fix: str = "", error: Error = InvalidModelConfig) -> None:
    if not is_int(value) or value < 0:
        refuse(key, value, "a non-negative integer", fix, error)


def choice(key: str, value: Any, options: Sequence[str], error: Error = InvalidModelConfig) -> None:
    if value not in options:
        refuse(key, value, f"one of {', '.join(options)}", error=error)


def heads_divide(embedding_dim: int, num_heads: int) -> None:
    """Heads split the embedding into equal slices, so num_heads must divide it."""
    positive_int("model.embedding_dim", embedding_dim)
    positive_int("model.num_heads", num_heads)
    if embedding_dim % num_heads != 0:
        raise InvalidModelConfig(
            f"embedding_dim ({embedding_dim}) must be divisible by num_heads ({num_heads}): "
            f"choose an embedding_dim that is a multiple of num_heads"
        )


def kv_heads_divide(num_heads: int, num_kv_heads: int | None) -> None:
    """GQA: each of the k key/value heads serves h / k query heads, so k must divide h (None: k = h)."""
    if num_kv_heads is not None and (not is_int(num_kv_heads) or num_kv_heads < 1 or num_heads % num_kv_heads):
        raise InvalidModelConfig(
            f"model.num_kv_heads must divide num_heads ({num_heads}), got {num_kv_heads!r}: "
            f"choose one of {', '.join(str(k) for k in range(1, num_heads + 1) if num_heads % k == 0)}, "
            f"or null for one per query head"
        )


def rope_fits(d_head: int) -> None:
    """RoPE turns pairs of numbers, so each head needs an even width."""
    if d_head % 2:
        raise InvalidModelConfig(
            f"model.positional=rope rotates pairs of numbers, but each head has {d_head} "
            f"(embedding_dim / num_heads): choose an even embedding_dim / num_heads"
        )


def logit_softcap(value: Any, vocab_size: int) -> None:
    """Capped logits lie in (-c, c), so no character can get more than e^c / (e^c + (V - 1) e^-c) of the
    probability: below c = ln(V - 1) / 2 not even half, and the model stays near uniform whatever it learns."""
    if value is None:
        return
    if not (is_number(value) and math.isfinite(value) and value > 0):
        refuse("model.logit_softcap", value, "a positive number, or null for no cap", "e.g. model.logit_softcap=30")
    least = math.log(vocab_size - 1) / 2 if vocab_size > 2 else 0.0  # 2: the value checks' stand-in vocabulary
    if value < least:
        refuse(
            "model.logit_softcap",
            value,
            f"at least ln(V - 1) / 2 = {least:.2f} for a vocabulary of V = {vocab_size} characters (below it no "
            f"character can get half the probability)",
            "e.g. model.logit_softcap=30, or null for no cap",
        )


POSITIONAL = ("sinusoidal", "learned", "rope")


def attention_window(value: Any) -> None:
    if value is not None:
        fix = "each query sees its last w positions (itself included); null lets it see every earlier one"
        positive_int("model.attention_window", value, fix)


def dropout(value: Any) -> None:
    if not (is_number(value) and 0.0 <= value < 1.0):
        refuse("model.dropout", value, "in [0, 1)")


def sampling(
    prefix: str, max_new_tokens: Any, temperature: Any, top_k: Any, top_p: Any, error: Error = InvalidModelConfig
) -> None:
    """Sampling settings of generate (prefix ""), of the final sample ("sample.") and of callbacks."""
    non_negative_int(f"{prefix}max_new_tokens", max_new_tokens, "0 draws no sample", error)
    if not (is_number(temperature) and temperature >= 0):  # NaN fails too
        refuse(f"{prefix}temperature", temperature, ">= 0 (0 means greedy)", error=error)
    if top_k is not None and (not is_int(top_k) or top_k < 1):
        refuse(f"{prefix}top_k", top_k, "an integer >= 1, or null for no limit", error=error)
    if top_p is not None and not (is_number(top_p) and 0.0 < top_p <= 1.0):
        refuse(f"{prefix}top_p", top_p, "in (0, 1], or null for no limit", error=error)
