"""Config checks shared by the models, each failing with a message that names the fix."""

from __future__ import annotations


def check_positive(**sizes: int) -> None:
    """Raise a ValueError naming the first size that is not a positive integer."""
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def check_heads(embedding_dim: int, num_heads: int) -> None:
    """Heads split the embedding into equal slices, so num_heads must divide it."""
    check_positive(embedding_dim=embedding_dim, num_heads=num_heads)
    if embedding_dim % num_heads != 0:
        raise ValueError(
            f"embedding_dim ({embedding_dim}) must be divisible by num_heads ({num_heads}): "
            f"choose an embedding_dim that is a multiple of num_heads"
        )
