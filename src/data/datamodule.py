"""TextDataModule: the text, its tokenizer, and the train/val/test windows."""

from __future__ import annotations

import os
from pathlib import Path

import lightning as L
import numpy as np
from torch.utils.data import DataLoader

from src import rules
from src.data.corpus import TINY_SHAKESPEARE_SHA256, TINY_SHAKESPEARE_URL, DataError, resolve_corpus
from src.data.token_cache import EncodedCorpus, open_corpus
from src.data.tokenizer import CharTokenizer
from src.data.windows import EpochWindowBatches, RandomWindowBatches, ValidationWindows, validation_batches

# Tokens per validation batch when data.val_batch_size is null (see eval_batch_size).
EVAL_TOKENS_CPU = 2_048
EVAL_TOKENS_ACCELERATOR = 65_536


def split_lengths(length: int, val_fraction: float, test_fraction: float) -> dict[str, int]:
    """Characters in each split of a text: train | val | test, contiguous, in that order."""
    n_val, n_test = int(length * val_fraction), int(length * test_fraction)
    return {"train": length - n_val - n_test, "val": n_val, "test": n_test}


def require_two_characters(vocab: list[str], path: Path) -> None:
    if len(vocab) < 2:
        raise DataError(
            f"{path} has only one distinct character ({vocab[0]!r}): there is nothing to predict; "
            f"choose a text with at least two different characters for data.path"
        )


class TextDataModule(L.LightningDataModule):
    """The text, encoded once into a memory-mapped token cache, split contiguously: train | val | test.

    Training batches are random windows, or (sampling="epoch") every window once per epoch, shuffled.
    Validation and test score the first `val_tokens` characters of their split (all if null) with
    non-overlapping windows: an exact loss over a fixed span, comparable across runs.
    """

    # Each argument's one line in `python -m src.train --help` (data.<key>; src/run/config.py reads it).
    HELP = {
        "path": "any UTF-8 text file to train on instead of Tiny Shakespeare",
        "cache_dir": "where texts are downloaded and encoded",
        "url": "where Tiny Shakespeare is downloaded from",
        "sha256": "Tiny Shakespeare's checksum",
        "batch_size": "windows of model.context_window characters per training step",
        "val_fraction": "the share of the text held out for validation",
        "test_fraction": "the share of the text held out for test",
        "val_tokens": "validation scores the first val_tokens characters of the val (and test) split; null = all",
        "sampling": "random: B windows at random places per step; epoch: every window once per epoch, shuffled",
        "val_batch_size": "windows per validation batch; null: ~2,048 tokens on a CPU, ~65,536 on a GPU",
        "num_workers": "DataLoader worker processes",
        "seed": "the seed of the training batches",
    }

    def __init__(
        self,
        context_window: int,
        batch_size: int,
        path: str | None = None,
        cache_dir: str = "data",
        url: str = TINY_SHAKESPEARE_URL,
        sha256: str = TINY_SHAKESPEARE_SHA256,
        val_fraction: float = 0.1,
        test_fraction: float = 0.0,
        val_tokens: int | None = None,
        sampling: str = "random",
        val_batch_size: int | None = None,
        num_workers: int = 0,
        seed: int = 0,
        tokenizer: CharTokenizer | None = None,
        corpus: EncodedCorpus | None = None,
    ):
        """tokenizer, corpus: what the run's plan read. Checks its settings and reads nothing: the plan
        constructs it once, before it opens the text, and hands it what it read."""
        super().__init__()
        rules.positive_int("model.context_window", context_window)
        rules.positive_int("data.batch_size", batch_size)
        rules.val_tokens(val_tokens, context_window)
        rules.choice("data.sampling", sampling, ("random", "epoch"))
        numbers = rules.is_number(val_fraction) and rules.is_number(test_fraction)  # a caller from Python too
        if not (numbers and 0 < val_fraction < 1 and 0 <= test_fraction < 1 and val_fraction + test_fraction < 1):
            raise rules.ConfigError(
                f"data.val_fraction ({val_fraction}) must be in (0, 1) and data.test_fraction "
                f"({test_fraction}) in [0, 1), together below 1 so that text is left to train on"
            )
        if val_batch_size is not None:
            rules.positive_int("data.val_batch_size", val_batch_size, "or null to size batches by tokens")
        if not (rules.is_int(num_workers) and 0 <= num_workers <= (os.cpu_count() or 1)):
            rules.refuse("data.num_workers", num_workers, f"between 0 and this machine's {os.cpu_count()} cores")
        self.context_window, self.batch_size, self.val_batch_size = context_window, batch_size, val_batch_size
        self.path, self.cache_dir, self.url, self.sha256 = path, cache_dir, url, sha256
        self.val_fraction, self.test_fraction = val_fraction, test_fraction
        self.val_tokens, self.sampling = val_tokens, sampling
        self.num_workers, self.seed = num_workers, seed
        self.tokenizer = tokenizer  # given when resuming: the checkpoint's vocabulary wins
        self.corpus = corpus  # encoded with the tokenizer's vocabulary
        self.splits: dict[str, np.ndarray] = {}

    def encoded(self) -> EncodedCorpus:
        if self.corpus is None:
            path = resolve_corpus(self.path, self.cache_dir, self.url, self.sha256)
            vocab = self.tokenizer.vocab if self.tokenizer is not None else None
            self.corpus = open_corpus(path, self.cache_dir, vocab)
        return self.corpus

    def prepare_data(self) -> None:
        self.encoded()

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        self.corpus = self.encoded()
        if self.tokenizer is None:
            require_two_characters(self.corpus.vocab, self.corpus.source)
            self.tokenizer = CharTokenizer(self.corpus.vocab)
        data = self.corpus.tokens
        sizes = split_lengths(len(data), self.val_fraction, self.test_fraction)
        n_train, n_val, n_test = sizes["train"], sizes["val"], sizes["test"]
        self.splits = {"train": data[:n_train], "val": data[n_train : n_train + n_val]}
        if n_test:
            self.splits["test"] = data[n_train + n_val :]
        # Fail now, with the fix, rather than at the first validation.
        ValidationWindows(self.scored("val"), self.context_window)
        RandomWindowBatches(self.splits["train"], self.context_window, self.batch_size)

    def scored(self, split: str) -> np.ndarray:
        """The span of a split that validation (or test) scores: its first val_tokens characters."""
        data = self.splits[split]
        return data if self.val_tokens is None else data[: self.val_tokens]

    def describe(self) -> str:
        """The data of the run in one line, for its header: split sizes, validated span, sampling."""
        n_train, n_val = len(self.splits["train"]), len(self.splits["val"])
        span = len(self.scored("val"))
        scored = "all of it" if span == n_val else f"its first {span:,}"
        windows = f"every window once per epoch ({n_train - self.context_window:,})" if self.sampling == "epoch" else ""
        return f"train {n_train:,} / val {n_val:,} characters (val/loss over {scored}) | {windows or 'random windows'}"

    def _rank_and_world(self) -> tuple[int, int]:
        trainer = self.trainer
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    def train_dataloader(self) -> RandomWindowBatches:
        rank, world = self._rank_and_world()
        # The batches a resumed run has trained on: Lightning restores global_step before it asks for this.
        done = self.trainer.global_step * self.trainer.accumulate_grad_batches if self.trainer is not None else 0
        data, T, B = self.splits["train"], self.context_window, self.batch_size
        if self.sampling == "epoch":
            return EpochWindowBatches(data, T, B, self.seed, rank, world, done)
        return RandomWindowBatches(data, T, B, self.seed, rank, done)

    def eval_batch_size(self) -> int:
        """data.val_batch_size, or (null) windows of ~EVAL_TOKENS_CPU tokens on a CPU, whose activations stay
        in its caches (BENCHMARKS.md, "Validation"), EVAL_TOKENS_ACCELERATOR on a GPU."""
        if self.val_batch_size is not None:
            return self.val_batch_size
        on_cpu = self.trainer is None or self.trainer.strategy.root_device.type == "cpu"
        tokens = EVAL_TOKENS_CPU if on_cpu else EVAL_TOKENS_ACCELERATOR
        return max(1, tokens // self.context_window)

    def _eval_loader(self, split: str) -> DataLoader:
        rank, world = self._rank_and_world()
        windows = ValidationWindows(self.scored(split), self.context_window, rank, world)
        return validation_batches(windows, self.eval_batch_size(), self.num_workers)

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader("val")

    def test_dataloader(self) -> DataLoader:
        if "test" not in self.splits:
            raise ValueError("there is no test split: set data.test_fraction > 0 (e.g. 0.05)")
        return self._eval_loader("test")
