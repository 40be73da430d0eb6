"""The models, in plain PyTorch (no Lightning, no Hydra), so they can be studied alone.

Start at `attention.py`: the attention formula lives there. build_model makes a model from the
plain config dict that Hydra and checkpoints store.
"""

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from src.model.attention import (
    MultiHeadAttention,
    SingleHeadSelfAttention,
    attention_without_parameters,
    causal_mask,
    scaled_dot_product_attention,
    softmax,
)
from src.model.gpt import GPT, GPTConfig
from src.model.language_model import CausalLanguageModel, count_parameters
from src.model.sampling import generate
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


__all__ = [
    "GPT",
    "MODELS",
    "CausalLanguageModel",
    "GPTConfig",
    "MultiHeadAttention",
    "SeedGPT",
    "SeedGPTConfig",
    "SingleHeadSelfAttention",
    "attention_without_parameters",
    "build_model",
    "causal_mask",
    "count_parameters",
    "generate",
    "scaled_dot_product_attention",
    "softmax",
]
