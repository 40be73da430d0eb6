"""The small models the model's tests build: torch and src.model only, no Lightning or Hydra."""

from dataclasses import fields

import torch

from src.model import GPT, GPTConfig, SeedGPT, SeedGPTConfig

VOCAB = 11
# Today's switches (issue 33) all on at once, in the model tests and the explorer's parity tests.
ALL_SWITCHES = {
    "positional": "rope",
    "norm": "rms",
    "activation": "swiglu",
    "qk_norm": True,
    "num_kv_heads": 2,
    "logit_softcap": 3.0,
    "value_embeddings": True,
    "smeared_keys": True,
    "attention_window": 3,
}
SEED_OPTIONS = {f.name for f in fields(SeedGPTConfig)}


def seed_switches(switches: dict) -> dict:
    """The seed model's share of a set of switches: the options it has (one attention layer: no
    MLP, no residual stream), and one key/value head where GQA is asked for (its 3 heads divide by 1)."""
    return {k: (1 if k == "num_kv_heads" else v) for k, v in switches.items() if k in SEED_OPTIONS}


def tiny_model(kind: str, fused: bool = False, **overrides) -> torch.nn.Module:
    """A small model of either kind with a fixed seed, so two calls build the same weights."""
    torch.manual_seed(0)
    if kind == "seed":
        return SeedGPT(
            SeedGPTConfig(vocab_size=VOCAB, context_window=8, embedding_dim=12, num_heads=3, fused=fused, **overrides)
        )
    cfg = dict(vocab_size=VOCAB, context_window=12, embedding_dim=16, num_heads=4, num_layers=2, fused=fused)
    return GPT(GPTConfig(**{**cfg, **overrides}))
