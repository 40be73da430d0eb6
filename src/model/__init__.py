"""The models, in plain PyTorch (no Lightning, no Hydra), so they can be studied alone. Start at `attention.py`,
where the attention formula lives. build_model makes a model from the config dict Hydra and checkpoints store."""

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from src.model.attention import (
    MultiHeadAttention,
    SingleHeadSelfAttention,
    attention_without_parameters,
    causal_mask,
    softmax,
)
from src.model.checks import InvalidModelConfig, unknown_key
from src.model.gpt import GPT, GPTConfig
from src.model.language_model import CausalLanguageModel, count_parameters
from src.model.seed_gpt import SeedGPT, SeedGPTConfig

MODELS = {"gpt": (GPT, GPTConfig), "seed": (SeedGPT, SeedGPTConfig)}


def options_of(kind: str) -> set[str]:
    return {f.name for f in fields(MODELS[kind][1])} - {"vocab_size"}


def model_config(config: Mapping[str, Any], vocab_size: int) -> GPTConfig | SeedGPTConfig:
    """config: {"kind": "gpt" | "seed", ...the fields of GPTConfig or SeedGPTConfig}, checked. `model=seed`
    brings the seed model's options; `model.kind=seed` alone keeps the GPT's, so it is refused naming the fix."""
    options = dict(config)
    kind = options.pop("kind", "gpt")
    if kind not in MODELS:
        raise InvalidModelConfig(
            f"model.kind must be one of {', '.join(MODELS)}, got {kind!r}: "
            f"choose the model with model=gpt or model=seed"
        )
    unknown = sorted(set(options) - options_of(kind))
    if unknown:
        others = [k for k in MODELS if k != kind and set(unknown) <= options_of(k)]
        if others and set(unknown) == options_of(others[0]) - options_of(kind):  # all of them: model.kind=
            raise InvalidModelConfig(
                f"model.kind={kind} keeps the options of the {others[0]} model (model.{unknown[0]}): "
                f"choose the model with model={kind} instead, which brings its own options"
            )
        if others:  # some of them, added by hand (model=seed +model.num_layers=2)
            raise InvalidModelConfig(
                f"model.{unknown[0]} is an option of the {others[0]} model, not of the {kind} model: remove it, "
                f"or choose model={others[0]}; the {kind} model's options are {', '.join(sorted(options_of(kind)))}"
            )
        unknown_key(f"model.{unknown[0]}", f"the {kind} model", sorted(options_of(kind)))
    return MODELS[kind][1](vocab_size=vocab_size, **options)  # __post_init__ checks each value


def sizes_of(config: Mapping[str, Any], vocab_size: int) -> tuple[int, int]:
    """The parameters build_model(config, vocab_size) allocates and the bytes of its buffers (the position
    tables), exactly: the model built on the meta device (shapes, no memory) and counted. The one parameter
    count: the run's memory and disk estimates, and the bound a checkpoint's file must hold (an edited config
    once made generate allocate until killed)."""
    import torch

    with torch.device("meta"):
        model = build_model(config, vocab_size)
    return count_parameters(model), sum(b.numel() * b.element_size() for b in model.buffers())


def parameters_of(config: Mapping[str, Any], vocab_size: int) -> int:
    return sizes_of(config, vocab_size)[0]


def build_model(config: Mapping[str, Any], vocab_size: int) -> CausalLanguageModel:
    cfg = model_config(config, vocab_size)
    return MODELS[config.get("kind", "gpt")][0](cfg)


__all__ = [
    "GPT",
    "MODELS",
    "GPTConfig",
    "MultiHeadAttention",
    "SeedGPT",
    "SeedGPTConfig",
    "SingleHeadSelfAttention",
    "attention_without_parameters",
    "build_model",
    "model_config",
    "parameters_of",
    "sizes_of",
    "causal_mask",
    "count_parameters",
    "softmax",
]
