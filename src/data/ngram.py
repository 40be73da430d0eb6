"""The n-gram ladder of a text: how well counting characters predicts it, the floor a model's val loss is
read against (makemore's first exercises; EurekaLabsAI/ngram).

Indexing: H_n = H(x_t | x_{t-n} .. x_{t-1}), the entropy of a character given the n before it, in nats,
counted exactly on the train split over every position t >= n:

    H_n = -(1 / M_n) sum_t ln( N(x_{t-n..t}) / N(x_{t-n..t-1}) )      H_0: the unigram entropy

N(s): how often string s occurs in the train split (as a context: followed by a character). H_n falls
with n towards 0: with 8 characters of context most contexts occur once in 1M characters, and counting
memorises them.

The val loss of order n: the val split scored by an n-gram model trained on the train split with
interpolated absolute discounting (Ney, Essen and Kneser 1994; Kneser-Ney without continuation counts),
a discount per order D_k = n1 / (n1 + 2 n2) (n1, n2: the (k+1)-grams seen once, twice; 0.5 when none is
seen once), down to the uniform distribution over the vocabulary V:

    P_{-1}(x) = 1 / V
    P_k(x | c) = max(N(c x) - D_k, 0) / N(c) + D_k T(c) / N(c) * P_{k-1}(x | c without its first character)

T(c): the distinct characters seen after c; a context never seen (N(c) = 0) is P_{k-1}'s. The val split
is scored as validation scores it: every character but its first, each with the characters before it in
the split (at most n), so the numbers compare with the model's val/loss.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from src.data.corpus import write_atomically

ORDERS = 9  # n = 0..8
VERSION = 1  # of the counts and the smoothing: bump it when either changes, and cached ladders are redone
MAX_LADDER_CHARACTERS = 10_000_000  # ~100 bytes of arrays per character: a longer text gets no ladder


@dataclass
class Ladder:
    """H_n on train (`train`) and the smoothed model's val loss (`val`), n = 0..ORDERS-1, in nats."""

    train: list[float]
    val: list[float]

    def to_dict(self) -> dict[str, list[float]]:
        return asdict(self)


def extend(ids: np.ndarray, tokens: np.ndarray, vocab_size: int, n: int) -> np.ndarray:
    """ids[t]: the id of the n characters ending at t -> the id of the n + 1 ending at t (-1 before
    position n), dense: ids stay below the text's length, so the next key cannot overflow."""
    keys = np.full(len(tokens), -1, dtype=np.int64)
    keys[n:] = ids[n - 1 : -1] * vocab_size + tokens[n:] if n else tokens
    out = np.full(len(tokens), -1, dtype=np.int64)
    out[n:] = np.unique(keys[n:], return_inverse=True)[1].reshape(-1)
    return out


def ladder(train: np.ndarray, val: np.ndarray, vocab_size: int, orders: int = ORDERS) -> Ladder:
    """The ladder of a text split into train and val token arrays (ids below vocab_size)."""
    tokens = np.concatenate([train, val]).astype(np.int64)
    n_train = len(train)
    t = np.arange(n_train)  # train positions; order n counts those with n characters before them
    scored = np.arange(n_train + 1, len(tokens))  # val: every position but the split's first
    inside = scored - n_train  # characters of context before it inside the val split
    p = np.full(len(scored), 1.0 / vocab_size)  # P_{-1}(x): uniform
    ending = np.zeros(len(tokens), dtype=np.int64)  # id of the n characters ending at t (n = 0: one)
    entropies, losses = [], []
    for n in range(orders):
        context = np.zeros_like(ending)  # id of x_{t-n..t-1}: the n characters ending at t - 1
        context[1:] = ending[:-1] if n else 0
        pair = extend(ending, tokens, vocab_size, n)  # id of x_{t-n..t}
        counted = t[n:]
        pair_count = np.bincount(pair[counted], minlength=int(pair.max()) + 1)  # N(c x)
        context_count = np.bincount(context[counted], minlength=int(context.max()) + 1)  # N(c)
        entropies.append(float(-np.mean(np.log(pair_count[pair[counted]] / context_count[context[counted]]))))
        context_of_pair = np.zeros(len(pair_count), dtype=np.int64)
        context_of_pair[pair[counted]] = context[counted]
        seen = np.flatnonzero(pair_count)
        distinct = np.bincount(context_of_pair[seen], minlength=len(context_count))  # T(c)
        n1, n2 = np.sum(pair_count == 1), np.sum(pair_count == 2)
        d = n1 / (n1 + 2 * n2) if n1 else 0.5  # D_n, never 0: every character keeps a share
        c, x = context[scored], pair[scored]
        known = inside >= n  # its n characters of context lie in the val split
        known[known] = context_count[c[known]] > 0  # and were seen in train
        c, x, q = c[known], x[known], p[known]
        p = p.copy()
        p[known] = (np.maximum(pair_count[x] - d, 0) + d * distinct[c] * q) / context_count[c]
        losses.append(float(-np.mean(np.log(p))))
        ending = pair
    return Ladder(entropies, losses)


def cached_ladder(directory: Path, train: np.ndarray, val: np.ndarray, vocab_size: int) -> Ladder:
    """ladder(), kept in the text's token cache folder (it takes ~1.7 s on Tiny Shakespeare, 2 cores): one
    file per split (train and val are contiguous from the text's start, so their lengths name them)."""
    path = Path(directory) / f"ngram-v{VERSION}-{len(train)}-{len(val)}-{vocab_size}.json"
    try:
        return Ladder(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        pass
    result = ladder(train, val, vocab_size)
    try:
        write_atomically(path, json.dumps(result.to_dict()))
    except OSError:  # a read-only cache: computed again next time
        pass
    return result


def gram(n: int) -> str:
    """The model with n characters of context: the (n + 1)-gram."""
    return {0: "unigram", 1: "bigram"}.get(n, f"{n + 1}-gram")


def place(loss: float, result: Ladder) -> str:
    """Where a val loss sits on the ladder, in words: between which n-gram models' val losses."""
    val, top = result.val, len(result.val) - 1
    best = min(range(len(val)), key=val.__getitem__)
    if loss <= val[best]:
        where = f"below every n-gram model of this text (the best, the {gram(best)}: {val[best]:.3f})"
    elif loss > val[0]:
        where = f"above even the unigram model of this text ({val[0]:.3f})"
    else:
        n = max(k for k in range(best + 1) if val[k] >= loss)
        where = f"between the {gram(n)} ({val[n]:.3f}) and the {gram(n + 1)} ({val[n + 1]:.3f}) models of this text"
    memorises = f"the {gram(top)} memorises (train H_{top} {result.train[top]:.3f}, val {val[top]:.3f})"
    return f"val loss {loss:.3f}: {where}; {memorises}"


def main() -> None:
    """`python -m src.data.ngram [TEXT] [VAL_FRACTION]`: the ladder of a text (default: Tiny Shakespeare
    in data/, its last tenth as val, as a default run splits it), a row per order."""
    import sys
    import time

    from src.data.corpus import cached_corpus_path
    from src.data.datamodule import split_lengths
    from src.data.token_cache import open_corpus

    path = Path(sys.argv[1]) if len(sys.argv) > 1 else cached_corpus_path("data")
    corpus = open_corpus(path, "data")
    sizes = split_lengths(corpus.num_tokens, float(sys.argv[2]) if len(sys.argv) > 2 else 0.1, 0.0)
    train, val = corpus.tokens[: sizes["train"]], corpus.tokens[sizes["train"] :]
    started = time.perf_counter()
    result = ladder(train, val, len(corpus.vocab))
    print(f"{path}: train {len(train):,} / val {len(val):,} characters, {time.perf_counter() - started:.1f} s")
    print("model      context  train H_n  val loss (nats)")
    for n, (h, v) in enumerate(zip(result.train, result.val, strict=True)):
        print(f"{gram(n):<10} {n:>7}  {h:>9.3f}  {v:>8.3f}")


if __name__ == "__main__":
    main()
