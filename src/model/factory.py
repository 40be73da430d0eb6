"""Build a model from a plain config dict, as Hydra and checkpoints store it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from src.model.gpt import GPT, GPTConfig
from src.model.language_model import CausalLanguageModel
from src.model.seed_gpt import SeedGPT, SeedGPTConfig

MODELS = {"gpt": (GPT, GPTConfig), "seed": (SeedGPT, SeedGPTConfig)}


def build_model(config: Mapping[str, Any], vocab_size: int) -> CausalLanguageModel:
    """config: {"kind": "gpt" | "seed", ...the fields of GPTConfig or SeedGPTConfig}."""
    options = dict(config)
    kind = options.pop("kind", "gpt")
    if kind not in MODELS:
        raise ValueError(f"model kind must be one of {', '.join(MODELS)}, got {kind!r}")
    model_class, config_class = MODELS[kind]
    known = {f.name for f in fields(config_class)} - {"vocab_size"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"model {kind!r} has no option {unknown[0]!r}; its options are {', '.join(sorted(known))}")
    return model_class(config_class(vocab_size=vocab_size, **options))
