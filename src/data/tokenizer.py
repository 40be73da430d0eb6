"""Character tokenizer: the vocabulary is the sorted set of characters of the training text."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, TextIO

import torch
from torch import Tensor


def show_characters(chars: list[str], limit: int = 5) -> str:
    """`'a', 'b' and 3 more`: characters named in an error message."""
    shown = ", ".join(repr(ch) for ch in chars[:limit])
    return shown + (f" and {len(chars) - limit} more" if len(chars) > limit else "")


# Control characters a terminal acts on rather than shows (ESC starts the sequences that change its
# title and colours, BEL, DEL, C1's CSI) and a carriage return not ending a line: shown escaped.
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]|\r(?!\n)")


def printable(text: str) -> str:
    """`text` as a terminal or TensorBoard's Markdown may show it: every control character but a new
    line and a tab as its escape (`\\x1b`, `\\r`), so a text's ESC sequences cannot change the terminal and
    a lone carriage return cannot end a line of a Markdown code block; `\\r\\n` stays a line end."""
    return CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


class PrintableStream:
    """Writes text as printable() shows it, a piece at a time as a sampler draws it: a trailing carriage
    return waits for the next piece, which says whether it ends a line (\\r\\n) or stands alone."""

    def __init__(self, out: TextIO):
        self.out, self.pending = out, ""

    def write(self, text: str) -> None:
        text = self.pending + text
        self.pending = "\r" if text.endswith("\r") else ""
        self.out.write(printable(text[: len(text) - len(self.pending)]))
        self.out.flush()

    def close(self) -> None:
        self.out.write(printable(self.pending))
        self.pending = ""
        self.out.flush()


class CharTokenizer:
    """Maps each character to its index in the sorted vocabulary, and back. Plain data (`to_dict`), so it
    travels inside every checkpoint and sampling never needs the dataset."""

    def __init__(self, vocab: Iterable[str]):
        self.vocab: list[str] = list(vocab)
        if not self.vocab:
            raise ValueError("the vocabulary is empty: the training text has no characters")
        if any(len(ch) != 1 for ch in self.vocab) or len(set(self.vocab)) != len(self.vocab):
            raise ValueError("a character vocabulary holds distinct single characters")
        self.index = {ch: i for i, ch in enumerate(self.vocab)}

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def unknown_characters(self, text: str) -> list[str]:
        return sorted(set(text) - self.index.keys())

    def encode(self, text: str, key: str = "the text") -> Tensor:
        """str -> LongTensor (len(text),); `key` names the text in the refusal of unknown characters."""
        unknown = self.unknown_characters(text)
        if unknown:
            raise ValueError(
                f"{key} has {len(unknown)} character(s) not in the vocabulary: {show_characters(unknown)}; "
                f"use only characters of the training text"
            )
        return torch.tensor([self.index[ch] for ch in text], dtype=torch.long)

    def decode(self, ids: Tensor | Iterable[int]) -> str:
        """ids (any shape flattened, or a list) -> str."""
        if isinstance(ids, Tensor):
            ids = ids.flatten().tolist()
        return "".join(self.vocab[i] for i in ids)

    def to_dict(self) -> dict[str, Any]:
        return {"vocab": "".join(self.vocab)}

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> CharTokenizer:
        return cls(state["vocab"])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CharTokenizer) and other.vocab == self.vocab

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"
