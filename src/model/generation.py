"""Generation one token at a time, as in the notes: predict, sample, append, repeat.

The model only ever sees the last `context_window` tokens, at positions 0..T-1. With the KV
cache each step feeds only the newest token; once the sequence outgrows the window the
positions of the cropped window shift, the cached keys and values no longer match them, and
each step is a full forward pass over the cropped window, exactly as uncached generation does.

`use_cache=False` is that definition written plainly (the reference the tests compare with).
The default path computes the same numbers with less work per token: no autograd bookkeeping,
one preallocated id buffer, logits for the last position only, the fused kernels, and on a
CPU the number of threads that a short probe finds fastest for one step.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import torch
from torch import Tensor

from src.model.checks import sampling
from src.model.language_model import CausalLanguageModel

Generators = torch.Generator | Sequence[torch.Generator] | None


class Tokenizer(Protocol):  # what sample_text needs (src/data/tokenizer.py's CharTokenizer is one)
    def encode(self, text: str) -> Tensor: ...

    def decode(self, ids: Tensor) -> str: ...


# Below float32's smallest normal number (1.2e-38) a temperature samples greedily, as 0 does: that is
# the distribution's limit as the temperature falls, and float32 cannot divide by such a number
# (1e-39 gave NaN probabilities and drew id 0 every step).
GREEDY_BELOW = torch.finfo(torch.float32).tiny


def next_token_distribution(
    logits: Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> Tensor:
    """Last-position logits (B, vocab) -> probabilities (B, vocab) after temperature, top-k, top-p.

    softmax((l - max l) / temperature): the same distribution as softmax(l / temperature), whose
    numerators are all <= 0, so no temperature overflows them to inf (inf - inf is NaN).
    """
    if temperature < GREEDY_BELOW:  # greedy: all the mass on the most likely token
        return torch.zeros_like(logits).scatter(-1, logits.argmax(dim=-1, keepdim=True), 1.0)
    logits = (logits - logits.amax(dim=-1, keepdim=True)) / temperature
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


def sample_from(probs: Tensor, generator: Generators = None) -> Tensor:
    """One id per row of probs (B, vocab) -> (B, 1), drawn with probability probs[i].

    The exponential race: with E_i ~ Exp(1), argmax p_i / E_i is i with probability p_i (the
    smallest of the Exp(p_i)-distributed E_i / p_i wins in proportion to its rate). It is exact
    and far cheaper per token than torch.multinomial on a CPU. A sequence of generators, one per
    row, makes each row's draws independent of the others (and of the batch size).
    """
    race = torch.empty_like(probs)
    if generator is None or isinstance(generator, torch.Generator):
        race.exponential_(1.0, generator=generator)
    else:
        for row, row_generator in zip(race, generator, strict=True):
            row.exponential_(1.0, generator=row_generator)
    return (probs / race).argmax(dim=-1, keepdim=True)


@contextlib.contextmanager
def fused_kernels(model: CausalLanguageModel) -> Iterator[None]:
    """Run a model trained on the plain tensor math on PyTorch's fused kernels (same numbers, faster)."""
    plain = [m for m in model.modules() if getattr(m, "fused", None) is False]
    for module in plain:
        module.fused = True
    try:
        yield
    finally:
        for module in plain:
            module.fused = False


def fastest_thread_count(step: Callable[[], object], threads: int, rounds: int = 3) -> int:
    """1 or `threads` CPU threads, whichever runs `step` faster (median of rounds); leaves 1 set. A second
    thread may halve one sequence's small matmuls on an idle machine, or make them many times slower
    on busy cores (BENCHMARKS.md, "Sampling and MFU"); the results are the same either way."""
    if threads <= 1:
        return 1
    times: dict[int, list[float]] = {1: [], threads: []}
    for _ in range(rounds):
        for candidate in times:
            torch.set_num_threads(candidate)
            start = time.perf_counter()
            step()
            times[candidate].append(time.perf_counter() - start)
    torch.set_num_threads(1)
    return min(times, key=lambda candidate: sorted(times[candidate])[rounds // 2])


def stream(
    model: CausalLanguageModel,
    prompt_ids: Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    greedy: bool = False,
    use_cache: bool = True,
    generator: Generators = None,
) -> Iterator[Tensor]:
    """prompt_ids (B, T) -> yields the ids (B,) of each new token, as soon as it is drawn. While the
    stream is open the model is in eval mode; closing or finishing it restores the mode."""
    sampling("", max_new_tokens, temperature, top_k, top_p)  # generate's own keys
    if prompt_ids.numel() == 0:
        raise ValueError("the prompt must contain at least one token")
    greedy = greedy or temperature < GREEDY_BELOW  # 0, or too small for float32 to divide by

    def pick(last_logits: Tensor) -> Tensor:  # (B, vocab) -> (B, 1)
        if greedy:
            return last_logits.argmax(dim=-1, keepdim=True)
        return sample_from(next_token_distribution(last_logits, temperature, top_k, top_p), generator)

    was_training = model.training
    model.eval()
    try:
        tokens = _fast_tokens if use_cache else _reference_tokens
        yield from tokens(model, prompt_ids, max_new_tokens, pick)
    finally:
        model.train(was_training)


@torch.no_grad()
def _reference_tokens(
    model: CausalLanguageModel, ids: Tensor, max_new_tokens: int, pick: Callable[[Tensor], Tensor]
) -> Iterator[Tensor]:
    """The definition: every step is a full forward pass over the last context_window tokens."""
    for _ in range(max_new_tokens):
        logits, _ = model(ids[:, -model.context_window :])  # (B, T, vocab)
        next_id = pick(logits[:, -1, :])  # (B, 1)
        ids = torch.cat([ids, next_id], dim=1)
        yield next_id[:, 0]


@torch.inference_mode()  # as a decorator, the mode ends at every yield: the caller keeps autograd
def _fast_tokens(
    model: CausalLanguageModel, prompt: Tensor, max_new_tokens: int, pick: Callable[[Tensor], Tensor]
) -> Iterator[Tensor]:
    """The same tokens as _reference_tokens, with a KV cache while the sequence fits the window."""
    B, T0 = prompt.shape
    window = model.context_window
    ids = torch.empty(B, T0 + max_new_tokens, dtype=prompt.dtype, device=prompt.device)  # every id, no cat
    ids[:, :T0] = prompt
    cache = model.new_kv_cache(B) if T0 < window else None  # a full window leaves nothing to cache

    def step(t: int) -> Tensor:
        """Logits (B, vocab) of the token after ids[:, :t]."""
        if cache is not None and cache.length == t - 1:  # the cache holds all but the newest token
            H, _ = model.hidden_states(ids[:, t - 1 : t], cache)
        elif cache is not None and t <= window:  # the first step: the prompt fills the cache
            H, _ = model.hidden_states(ids[:, :t], cache)
        else:  # the window slid: positions shifted, a full pass over the cropped window
            H, _ = model.hidden_states(ids[:, max(0, t - window) : t])
        return model.logits(H[:, -1])  # only the last position is sampled from

    threads, on_cpu = torch.get_num_threads(), ids.device.type == "cpu"
    with fused_kernels(model):
        try:
            if on_cpu:
                torch.set_num_threads(1)  # the first token at once; one thread is never far off for one step
            for t in range(T0, T0 + max_new_tokens):
                next_id = pick(step(t))  # (B, 1)
                ids[:, t] = next_id[:, 0]
                if cache is not None and cache.length >= window:
                    cache = None
                yield ids[:, t]
                if on_cpu and t == T0 and T0 + max_new_tokens > window:
                    # Full-window steps lie ahead: time one at 1 and at the default thread count.
                    full_window = functools.partial(model.hidden_states, ids.new_zeros(B, window))
                    torch.set_num_threads(fastest_thread_count(full_window, threads))
        finally:
            torch.set_num_threads(threads)


def generate(model: CausalLanguageModel, prompt_ids: Tensor, max_new_tokens: int, **sampling: Any) -> Tensor:
    """prompt_ids: (T,) or (B, T) -> the prompt followed by max_new_tokens sampled ids. `sampling`: stream()'s
    settings by name; a `generator` (one, or one per row) leaves the global random state alone."""
    squeeze = prompt_ids.dim() == 1
    ids = prompt_ids.unsqueeze(0) if squeeze else prompt_ids  # (B, T)
    new = list(stream(model, ids, max_new_tokens, **sampling))
    out = torch.cat([ids, torch.stack(new, dim=1)], dim=1) if new else ids.clone()
    return out[0] if squeeze else out


def sample_generators(seed: int | None, num_samples: int, device: torch.device | str) -> list[torch.Generator] | None:
    """Sample i draws from its own generator seeded seed + i: it is what `seed=seed+i` gives alone."""
    if seed is None:
        return None
    return [torch.Generator(device).manual_seed(seed + i) for i in range(num_samples)]


def sample_text(
    model: CausalLanguageModel,
    tokenizer: Tokenizer,
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
    sampling = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "greedy": greedy}
    ids = generate(model, prompt_ids, max_new_tokens, generator=sample_generators(seed, 1, device), **sampling)
    return tokenizer.decode(ids)
