"""The mutation test of the exercises (issue 47): wrong answers a learner would write, each loaded as the
learner's file is and graded by its exercise's own tests, in this process (the grading plugin, run by
pytest.main). Every mutant must fail at least one of them; the reference's own code must pass them all."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from src.exercises import EXERCISES, FOLDER_VARIABLE, VARIABLE, learner_file, write
from src.exercises.__main__ import mapped_tests
from tests.helpers import ROOT

HEAD = "import math\n\nimport torch\nimport torch.nn.functional as F\n\n"


def method(module: str, cls: str, body: str) -> str:
    """A learner's file for a method exercise: their subclass of the reference, with `body` its methods."""
    return f"{HEAD}from {module} import {cls} as Reference\n\n\nclass {cls}(Reference):\n{body}"


CAUSAL_MASK = (
    HEAD
    + "def causal_mask(T, device=None, window=None):\n    ones = torch.ones(T, T, dtype=torch.bool, device=device)\n"
)
SOFTMAX = HEAD + "def softmax(scores, dim=-1):\n"
ATTENTION = (
    HEAD
    + "from src.model.attention import softmax\n\n\n"
    + "def scaled_dot_product_attention(Q, K, V, mask=None, dropout=0.0, training=False):\n"
)
SPLIT = """    def split_heads(self, X, num_heads=None):
        B, T, _ = X.shape
"""
MERGE = """    def merge_heads(self, X):
        B, _, T, _ = X.shape
        return X.transpose(1, 2).reshape(B, T, self.d_model)
"""
RIGHT_SPLIT = SPLIT + "        return X.reshape(B, T, num_heads or self.num_heads, self.d_head).transpose(1, 2)\n"
LAYER_NORM = "    def forward(self, x):\n        mean = x.mean(dim=-1, keepdim=True)\n"
NORMED = """        if self.gain is not None:
            y = y * self.gain
        if self.bias is not None:
            y = y + self.bias
        return y
"""
CROSS_ENTROPY = HEAD + "def cross_entropy(logits, targets, fused=False, reduction='mean'):\n"
LOG_PROBS = """    shifted = logits - logits.amax(dim=-1, keepdim=True)
    log_probs = shifted - shifted.exp().sum(dim=-1, keepdim=True).log()
"""
POSITIONS = (
    HEAD
    + """def sinusoidal_encoding(max_len, d):
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
"""
)
UPDATE = "    def update(self, layer, K, V):\n        end = self.length + K.shape[2]\n"
REFUSE = "        if end > self.max_len:\n            raise ValueError('past max_len')\n"
WRITE = (
    "        self.keys[layer, :, :, self.length : end] = K\n        self.values[layer, :, :, self.length : end] = V\n"
)

# exercise -> {what the learner got wrong: their file}
MUTANTS: dict[str, dict[str, str]] = {
    "causal_mask": {
        "the diagonal masked too (off by one)": CAUSAL_MASK + "    return ones.triu(diagonal=0).view(1, 1, T, T)\n",
        "one future position let through": CAUSAL_MASK + "    return ones.triu(diagonal=2).view(1, 1, T, T)\n",
        "True where j <= i (the past masked)": CAUSAL_MASK + "    return ones.tril().view(1, 1, T, T)\n",
        "shaped (T, T), no (1, 1) in front": CAUSAL_MASK + "    return ones.triu(diagonal=1)\n",
        "a float 0/1 mask, not a bool one": CAUSAL_MASK + "    return ones.triu(diagonal=1).float().view(1, 1, T, T)\n",
        "the sliding window ignored": CAUSAL_MASK + "    return ones.triu(diagonal=1).view(1, 1, T, T)\n",
        "the window one key too wide": CAUSAL_MASK
        + "    mask = ones.triu(diagonal=1)\n"
        + "    if window is not None:\n"
        + "        mask = mask | ones.tril(diagonal=-window - 1)\n"
        + "    return mask.view(1, 1, T, T)\n",
    },
    "softmax": {
        "no max subtracted (exp overflows)": SOFTMAX
        + "    e = scores.exp()\n    return e / e.sum(dim=dim, keepdim=True)\n",
        "summed over every entry, not the row": SOFTMAX
        + "    e = (scores - scores.amax(dim=dim, keepdim=True)).exp()\n    return e / e.sum()\n",
        "dim ignored (always the first)": SOFTMAX
        + "    e = (scores - scores.amax(dim=0, keepdim=True)).exp()\n    return e / e.sum(dim=0, keepdim=True)\n",
        "the max added, not subtracted": SOFTMAX
        + "    e = (scores + scores.amax(dim=dim, keepdim=True)).exp()\n    return e / e.sum(dim=dim, keepdim=True)\n",
    },
    "attention": {
        "scaled by d_k, not sqrt(d_k)": ATTENTION
        + """    scores = Q @ K.transpose(-2, -1) / Q.shape[-1]
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = softmax(scores, dim=-1)
    return weights @ V, weights
""",
        "not scaled": ATTENTION
        + """    scores = Q @ K.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = softmax(scores, dim=-1)
    return weights @ V, weights
""",
        "the mask applied after the softmax": ATTENTION
        + """    weights = softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), dim=-1)
    if mask is not None:
        weights = weights.masked_fill(mask, 0.0)
    return weights @ V, weights
""",
        "masked with 0, not -inf": ATTENTION
        + """    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, 0.0)
    weights = softmax(scores, dim=-1)
    return weights @ V, weights
""",
        "the softmax over the queries, not the keys": ATTENTION
        + """    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = softmax(scores, dim=-2)
    return weights @ V, weights
""",
        "dropout also at evaluation": ATTENTION
        + """    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = F.dropout(softmax(scores, dim=-1), p=dropout)
    return weights @ V, weights
""",
        "dropout on the context, not the weights": ATTENTION
        + """    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = softmax(scores, dim=-1)
    return F.dropout(weights @ V, p=dropout, training=training), weights
""",
    },
    "heads": {
        "num_heads ignored": method(
            "src.model.attention",
            "MultiHeadAttention",
            SPLIT + "        return X.reshape(B, T, self.num_heads, self.d_head).transpose(1, 2)\n" + MERGE,
        ),
        "reshaped to (B, h, T, d_head) without the transpose": method(
            "src.model.attention",
            "MultiHeadAttention",
            SPLIT + "        return X.reshape(B, num_heads or self.num_heads, T, self.d_head)\n" + MERGE,
        ),
        "merged without transposing back": method(
            "src.model.attention",
            "MultiHeadAttention",
            RIGHT_SPLIT
            + """    def merge_heads(self, X):
        B, _, T, _ = X.shape
        return X.reshape(B, T, self.d_model)
""",
        ),
        "concatenated in the wrong order (last head first)": method(
            "src.model.attention",
            "MultiHeadAttention",
            RIGHT_SPLIT
            + """    def merge_heads(self, X):
        B, _, T, _ = X.shape
        return X.flip(1).transpose(1, 2).reshape(B, T, self.d_model)
""",
        ),
        "a head's columns interleaved (d_head before h)": method(
            "src.model.attention",
            "MultiHeadAttention",
            SPLIT
            + "        return X.reshape(B, T, self.d_head, num_heads or self.num_heads).permute(0, 3, 1, 2)\n"
            + """    def merge_heads(self, X):
        B, _, T, _ = X.shape
        return X.permute(0, 2, 3, 1).reshape(B, T, self.d_model)
""",
        ),
    },
    "layer_norm": {
        "eps outside the square root": method(
            "src.model.layers",
            "LayerNorm",
            LAYER_NORM
            + "        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)\n"
            + "        y = (x - mean) / (torch.sqrt(var) + self.eps)\n"
            + NORMED,
        ),
        "the unbiased variance (d - 1)": method(
            "src.model.layers",
            "LayerNorm",
            LAYER_NORM + "        y = (x - mean) / torch.sqrt(x.var(dim=-1, keepdim=True) + self.eps)\n" + NORMED,
        ),
        "eps fixed at 1e-5, not self.eps": method(
            "src.model.layers",
            "LayerNorm",
            LAYER_NORM
            + "        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)\n"
            + "        y = (x - mean) / torch.sqrt(var + 1e-5)\n"
            + NORMED,
        ),
        "normalised over the first dimension": method(
            "src.model.layers",
            "LayerNorm",
            "    def forward(self, x):\n        mean = x.mean(dim=0, keepdim=True)\n"
            + "        var = ((x - mean) ** 2).mean(dim=0, keepdim=True)\n"
            + "        y = (x - mean) / torch.sqrt(var + self.eps)\n"
            + NORMED,
        ),
        "the mean not subtracted (RMSNorm)": method(
            "src.model.layers",
            "LayerNorm",
            "    def forward(self, x):\n        y = x / torch.sqrt((x**2).mean(dim=-1, keepdim=True) + self.eps)\n"
            + NORMED,
        ),
    },
    "cross_entropy": {
        'reduction="none" ignored': CROSS_ENTROPY
        + LOG_PROBS
        + "    return -log_probs.gather(1, targets.unsqueeze(1)).squeeze(1).mean()\n",
        "summed, not averaged": CROSS_ENTROPY
        + LOG_PROBS
        + "    losses = -log_probs.gather(1, targets.unsqueeze(1)).squeeze(1)\n"
        + "    return losses.sum() if reduction == 'mean' else losses\n",
        "the log of the softmax (log 0 = -inf)": CROSS_ENTROPY
        + "    probs = torch.softmax(logits, dim=-1)\n"
        + "    losses = -probs.gather(1, targets.unsqueeze(1)).squeeze(1).log()\n"
        + "    return losses.mean() if reduction == 'mean' else losses\n",
        "no max subtracted (exp overflows)": CROSS_ENTROPY
        + "    log_probs = logits - logits.exp().sum(dim=-1, keepdim=True).log()\n"
        + "    losses = -log_probs.gather(1, targets.unsqueeze(1)).squeeze(1)\n"
        + "    return losses.mean() if reduction == 'mean' else losses\n",
        "every position's logits indexed by every target": CROSS_ENTROPY
        + LOG_PROBS
        + "    losses = -log_probs[:, targets].mean(dim=0)\n"
        + "    return losses.mean() if reduction == 'mean' else losses\n",
    },
    "positions": {
        "the last column stays zero at odd widths": POSITIONS
        + """    pe = torch.zeros(max_len, d, dtype=torch.float64)
    for i in range(d // 2):
        angle = pos[:, 0] / 10000 ** (2 * i / d)
        pe[:, 2 * i], pe[:, 2 * i + 1] = torch.sin(angle), torch.cos(angle)
    return pe.float()
""",
        "the exponent i/d, not 2i/d": POSITIONS
        + """    i = torch.arange(0, d, 2, dtype=torch.float64) / 2
    angle = pos / 10000 ** (i / d)
    pe = torch.zeros(max_len, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d // 2])
    return pe.float()
""",
        "sine and cosine swapped": POSITIONS
        + """    angle = pos / 10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    pe = torch.zeros(max_len, d, dtype=torch.float64)
    pe[:, 0::2] = torch.cos(angle)
    pe[:, 1::2] = torch.sin(angle[:, : d // 2])
    return pe.float()
""",
        "each column its own exponent (2i+1 for the cosines)": POSITIONS
        + """    angle = pos / 10000 ** (torch.arange(d, dtype=torch.float64) / d)
    pe = torch.zeros(max_len, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle[:, 0::2])
    pe[:, 1::2] = torch.cos(angle[:, 1::2])
    return pe.float()
""",
        "computed in float32": POSITIONS.replace("float64", "float32")
        + """    angle = pos / 10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
    pe = torch.zeros(max_len, d)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d // 2])
    return pe
""",
        "returned in float64": POSITIONS
        + """    angle = pos / 10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    pe = torch.zeros(max_len, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d // 2])
    return pe
""",
    },
    "kv_cache": {
        "the whole buffer returned, empty slots included": method(
            "src.model.kv_cache",
            "KVCache",
            UPDATE + REFUSE + WRITE + "        return self.keys[layer], self.values[layer]\n",
        ),
        "overflows silently (no refusal past max_len)": method(
            "src.model.kv_cache",
            "KVCache",
            UPDATE + WRITE + "        return self.keys[layer, :, :, :end], self.values[layer, :, :, :end]\n",
        ),
        "a full cache refused (end >= max_len, one too early)": method(
            "src.model.kv_cache",
            "KVCache",
            UPDATE
            + "        if end >= self.max_len:\n            raise ValueError('past max_len')\n"
            + WRITE
            + "        return self.keys[layer, :, :, :end], self.values[layer, :, :, :end]\n",
        ),
        "only the new positions returned": method(
            "src.model.kv_cache", "KVCache", UPDATE + REFUSE + WRITE + "        return K, V\n"
        ),
        "length advanced inside update (once per layer)": method(
            "src.model.kv_cache",
            "KVCache",
            UPDATE
            + REFUSE
            + WRITE
            + "        self.length = end\n"
            + "        return self.keys[layer, :, :, :end], self.values[layer, :, :, :end]\n",
        ),
        "every layer's slot written": method(
            "src.model.kv_cache",
            "KVCache",
            UPDATE
            + REFUSE
            + "        self.keys[:, :, :, self.length : end] = K\n        self.values[:, :, :, self.length : end] = V\n"
            + "        return self.keys[layer, :, :, :end], self.values[layer, :, :, :end]\n",
        ),
        "written from position 0 each time": method(
            "src.model.kv_cache",
            "KVCache",
            UPDATE
            + REFUSE
            + "        T = K.shape[2]\n"
            + "        self.keys[layer, :, :, :T], self.values[layer, :, :, :T] = K, V\n"
            + "        return self.keys[layer, :, :, :end], self.values[layer, :, :, :end]\n",
        ),
    },
}


class Outcomes:
    """A pytest plugin that keeps which graded tests failed and which passed."""

    def __init__(self) -> None:
        self.failed: list[str] = []
        self.passed: list[str] = []
        self.errors: list[str] = []  # the first line of each failure

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.failed.append(report.nodeid)
            self.errors += [line for line in report.longreprtext.splitlines() if line.startswith("E ")][:1]
        elif report.when == "call" and report.passed:
            self.passed.append(report.nodeid)


@contextmanager
def fresh_test_modules(nodes: list[str]) -> Iterator[None]:
    """The graded test modules imported anew by the grading run, after the learner's code is swapped in (as in
    `make check-exercise`'s own process), whatever this process imported before; then given back."""
    names = {Path(node.split("::")[0]).stem for node in nodes}
    saved = {name: sys.modules.pop(name) for name in names if name in sys.modules}
    try:
        yield
    finally:
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


def grade(name: str, folder: Path, monkeypatch: pytest.MonkeyPatch, stop_at_first: bool, tb: str = "no") -> Outcomes:
    """`make check-exercise NAME=<name>`'s pytest run on the learner's file in `folder`, in this process."""
    monkeypatch.setenv(FOLDER_VARIABLE, str(folder))
    monkeypatch.setenv(VARIABLE, name)
    nodes = mapped_tests(name)
    outcomes = Outcomes()
    args = ["-p", "src.exercises.grading", "-o", "addopts=", "-p", "no:cacheprovider", "-q", f"--tb={tb}"]
    with fresh_test_modules(nodes):
        pytest.main([*args, *(["-x"] if stop_at_first else []), *(str(ROOT / n) for n in nodes)], plugins=[outcomes])
    return outcomes


def test_every_exercise_has_mutants():
    assert set(MUTANTS) == set(EXERCISES)
    assert all(len(mutants) >= 4 for mutants in MUTANTS.values())


@pytest.mark.slow  # 46 gradings in-process: about 50 s
@pytest.mark.parametrize("name", list(EXERCISES))
def test_the_reference_passes_and_every_mutant_fails_a_graded_test(name, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(FOLDER_VARIABLE, str(tmp_path))
    write(name, solution=True)
    reference = grade(name, tmp_path, monkeypatch, stop_at_first=False)
    out, tests = capsys.readouterr().out, len(EXERCISES[name].tests)
    assert reference.failed == [] and len(reference.passed) >= tests, out
    assert f"exercise {name}: all {tests} tests of the notes' step" in out, out  # counted as the catalogue lists
    survivors = []
    for wrong, text in MUTANTS[name].items():
        learner_file(name).write_text(text, encoding="utf-8")
        graded = grade(name, tmp_path, monkeypatch, stop_at_first=True)
        if not graded.failed:
            survivors.append(wrong)
        assert not any("NameError" in error for error in graded.errors), (wrong, graded.errors)  # a typo here
    assert survivors == [], f"exercise {name}: these wrong answers pass every graded test: {survivors}"


def test_a_wrong_answer_gets_the_notes_once_and_tensors_labelled_yours_and_expected(tmp_path, monkeypatch, capsys):
    """Issue 47: the notes' 9 lines came after each failing test, and two unlabelled tensors."""
    monkeypatch.setenv(FOLDER_VARIABLE, str(tmp_path))
    learner_file("layer_norm").write_text(MUTANTS["layer_norm"]["normalised over the first dimension"])
    graded = grade("layer_norm", tmp_path, monkeypatch, stop_at_first=False, tb="short")
    out = capsys.readouterr().out
    assert len(graded.failed) >= 3, out
    assert out.count("exercise layer_norm: the notes' step 'layer norm' is not right yet.") == 1, out
    assert out.count("var  = (1/d) sum_i (x_i - mean)^2") == 1, out
    assert re.search(r"yours \(the code under test\):\nE +tensor\(.*\nE +expected:\nE +tensor\(", out, re.S), out
