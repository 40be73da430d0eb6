"""Generation one token at a time, as in the notes: predict, sample, append, repeat.

The model only ever sees the last `context_window` tokens. With the KV cache each step feeds
only the newest token; once the sequence outgrows the window the positions of the cropped
window shift, the cached keys and values no longer match them, and each step falls back to a
full forward pass over the cropped window, exactly as uncached generation does.
"""

from __future__ import annotations

import torch
from torch import Tensor

from src.data.tokenizer import CharTokenizer
from src.model.language_model import CausalLanguageModel


def check_sampling_args(max_new_tokens: int, temperature: float, top_k: int | None, top_p: float | None) -> None:
    """Raise a ValueError that names the first invalid sampling argument."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be a non-negative integer, got {max_new_tokens!r}")
    if not temperature >= 0:  # also rejects NaN
        raise ValueError(f"temperature must be >= 0 (0 means greedy), got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be an integer >= 1 (or None for no limit), got {top_k!r}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1] (or None for no limit), got {top_p!r}")


def next_token_distribution(
    logits: Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> Tensor:
    """Last-position logits (B, vocab) -> probabilities (B, vocab) after temperature, top-k, top-p."""
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth_largest = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth_largest, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if top_p is not None and top_p < 1.0:
        # Nucleus: keep the most likely tokens until their mass reaches top_p (at least one).
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
        sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def sample_from(probs: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """One id per row of probs (B, vocab) -> (B, 1), drawn with probability probs[i].

    The exponential race: with E_i ~ Exp(1), argmax p_i / E_i is i with probability p_i (the
    smallest of the Exp(p_i)-distributed E_i / p_i wins in proportion to its rate). It is exact
    and far cheaper per token than torch.multinomial on a CPU.
    """
    race = torch.empty_like(probs).exponential_(1.0, generator=generator)
    return (probs / race).argmax(dim=-1, keepdim=True)


@torch.no_grad()
def generate(
    model: CausalLanguageModel,
    prompt_ids: Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    greedy: bool = False,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
) -> Tensor:
    """prompt_ids: (T,) or (B, T) -> the prompt followed by max_new_tokens sampled ids.

    greedy (or temperature 0) always takes the most likely token. `generator` makes sampling
    reproducible without touching the global random state.
    """
    check_sampling_args(max_new_tokens, temperature, top_k, top_p)
    if prompt_ids.numel() == 0:
        raise ValueError("the prompt must contain at least one token")
    squeeze = prompt_ids.dim() == 1
    ids = prompt_ids.unsqueeze(0) if squeeze else prompt_ids  # (B, T)
    greedy = greedy or temperature == 0
    window = model.context_window

    was_training = model.training
    model.eval()
    cache = model.new_kv_cache(ids.shape[0]) if use_cache else None
    for step in range(max_new_tokens):
        if step > 0 and cache is not None and cache.length < window:
            logits, _ = model(ids[:, -1:], cache=cache)  # only the newest position
        else:  # the first step, no cache, or the window slid: a full pass over the window
            logits, _ = model(ids[:, -window:], cache=cache if step == 0 else None)
        last = logits[:, -1, :]  # (B, vocab)
        if greedy:
            next_id = last.argmax(dim=-1, keepdim=True)  # (B, 1)
        else:
            probs = next_token_distribution(last, temperature, top_k, top_p)
            next_id = sample_from(probs, generator)  # (B, 1)
        ids = torch.cat([ids, next_id], dim=1)
    model.train(was_training)
    return ids[0] if squeeze else ids


def sample_text(
    model: CausalLanguageModel,
    tokenizer: CharTokenizer,
    prompt: str,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    greedy: bool = False,
    seed: int | None = None,
) -> str:
    """The prompt continued by max_new_tokens characters; the same seed gives the same text."""
    device = next(model.parameters()).device
    prompt_ids = tokenizer.encode(prompt).to(device)  # unknown characters: ValueError naming them
    generator = torch.Generator(device).manual_seed(seed) if seed is not None else None
    ids = generate(model, prompt_ids, max_new_tokens, temperature, top_k, top_p, greedy, generator=generator)
    return tokenizer.decode(ids)
