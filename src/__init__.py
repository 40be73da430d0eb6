"""scratchgpt: a causal multi-head-attention GPT written from tensors, trained with Lightning + Hydra."""
