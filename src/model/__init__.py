"""The models, in plain PyTorch (no Lightning, no Hydra), so they can be studied alone.

Start at `attention.py`: the attention formula lives there.
"""

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

__all__ = [
    "GPT",
    "CausalLanguageModel",
    "GPTConfig",
    "MultiHeadAttention",
    "SeedGPT",
    "SeedGPTConfig",
    "SingleHeadSelfAttention",
    "attention_without_parameters",
    "causal_mask",
    "count_parameters",
    "generate",
    "scaled_dot_product_attention",
    "softmax",
]
