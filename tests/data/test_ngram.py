"""The n-gram ladder (src/data/ngram.py): H_n against a brute-force count, each order's val loss against
the smoothed model written out with dictionaries, a text of other scripts, and a run's report."""

import json
import math
from collections import Counter

import numpy as np
import pytest

from src.data.ngram import ladder, place

TEXT = "the cat sat on the mat; the rat sat on the hat. that cat? the bat!\n" * 3 + "a cat ran at the tan man\n"


def encoded(text: str) -> tuple[np.ndarray, int]:
    vocab = sorted(set(text))
    return np.array([vocab.index(ch) for ch in text]), len(vocab)


def brute_entropies(text: str, orders: int) -> list[float]:
    """H_n = -mean over t >= n of ln N(x_{t-n..t}) / N(x_{t-n..t-1}), every string counted by hand."""
    out = []
    for n in range(orders):
        positions = range(n, len(text))
        pairs = Counter(text[t - n : t + 1] for t in positions)
        contexts = Counter(text[t - n : t] for t in positions)
        out.append(
            -sum(math.log(pairs[text[t - n : t + 1]] / contexts[text[t - n : t]]) for t in positions) / len(positions)
        )
    return out


def written_model(train: str, vocab_size: int, n: int):
    """P_n(x | context) of interpolated absolute discounting, as the module's docstring writes it."""
    tables = []
    for k in range(n + 1):
        positions = range(k, len(train))
        pairs = Counter(train[t - k : t + 1] for t in positions)
        contexts = Counter(train[t - k : t] for t in positions)
        followers = Counter(s[:-1] for s in pairs)
        n1, n2 = sum(v == 1 for v in pairs.values()), sum(v == 2 for v in pairs.values())
        tables.append((pairs, contexts, followers, n1 / (n1 + 2 * n2) if n1 else 0.5))

    def p(x: str, context: str, k: int) -> float:
        if k < 0:
            return 1 / vocab_size
        pairs, contexts, followers, d = tables[k]
        c = context[len(context) - k :] if k else ""
        lower = p(x, context, k - 1)
        if contexts[c] == 0:
            return lower
        return (max(pairs[c + x] - d, 0) + d * followers[c] * lower) / contexts[c]

    return p


def test_entropies_equal_a_brute_force_count():
    tokens, vocab_size = encoded(TEXT)
    result = ladder(tokens[:200], tokens[200:], vocab_size, orders=6)
    assert result.train == pytest.approx(brute_entropies(TEXT[:200], 6), abs=1e-12)
    assert result.train[0] > result.train[1] > result.train[5]


def test_val_losses_equal_the_written_model():
    tokens, vocab_size = encoded(TEXT)
    train, val = TEXT[:200], TEXT[200:]
    result = ladder(tokens[:200], tokens[200:], vocab_size, orders=6)
    for n in range(6):
        p = written_model(train, vocab_size, n)
        # a distribution: it sums to 1 over the vocabulary, for a context seen and one never seen
        for context in ("the ", "zzzz"):
            assert sum(p(x, context, n) for x in sorted(set(TEXT))) == pytest.approx(1.0)
        # every val character but the first, with the (at most n) characters before it in the split
        loss = -sum(math.log(p(val[i], val[max(0, i - n) : i], min(n, i))) for i in range(1, len(val))) / (len(val) - 1)
        assert result.val[n] == pytest.approx(loss, abs=1e-12)


def test_another_script_and_its_place():
    text = "猫が座った🐱。犬が走った🐶。" * 6 + "猫が走った🐱。"
    tokens, vocab_size = encoded(text)
    result = ladder(tokens[:80], tokens[80:], vocab_size)
    assert len(result.train) == len(result.val) == 9
    assert result.train == pytest.approx(brute_entropies(text[:80], 9), abs=1e-12)
    assert result.val[0] > result.val[2]  # context helps on a text this regular
    assert "between the unigram" in place((result.val[0] + result.val[1]) / 2, result)
    assert "below every n-gram model" in place(0.0, result)
    assert place(99.0, result).startswith("val loss 99.000: above even the unigram model")


def test_a_run_places_its_loss_on_the_ladder(trained):
    run_dir, printed = trained  # the session's tiny run (tests/conftest.py)
    result = json.loads((run_dir / "result.json").read_text())
    record = result["ngram"]
    assert len(record["train"]) == len(record["val"]) == 9
    assert record["placed"].startswith(f"val loss {result['best_val_loss']:.3f}: ")
    assert record["placed"] in printed
