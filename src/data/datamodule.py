"""ShakespeareDataModule: the text, its tokenizer, and the train/val/test windows."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader

from src.data.corpus import TINY_SHAKESPEARE_SHA256, TINY_SHAKESPEARE_URL, read_text, resolve_corpus
from src.data.tokenizer import CharTokenizer
from src.data.windows import RandomWindowBatches, ValidationWindows


class ShakespeareDataModule(L.LightningDataModule):
    """Encodes the text once into a compact tensor and splits it contiguously: train | val | test.

    Training batches are random windows (see RandomWindowBatches); validation and test cover
    their split with non-overlapping windows, so their loss is exact and comparable across runs.
    Any UTF-8 text works through `path`; the checksum applies only to the default corpus.
    """

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
        val_batch_size: int = 256,
        num_workers: int = 0,
        seed: int = 0,
        tokenizer: CharTokenizer | None = None,
    ):
        super().__init__()
        for name, value in [("context_window", context_window), ("batch_size", batch_size)]:
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not (0 < val_fraction < 1 and 0 <= test_fraction < 1 and val_fraction + test_fraction < 1):
            raise ValueError(
                f"data.val_fraction ({val_fraction}) must be in (0, 1) and data.test_fraction ({test_fraction}) "
                f"in [0, 1), leaving text to train on"
            )
        self.context_window, self.batch_size, self.val_batch_size = context_window, batch_size, val_batch_size
        self.path, self.cache_dir, self.url, self.sha256 = path, cache_dir, url, sha256
        self.val_fraction, self.test_fraction = val_fraction, test_fraction
        self.num_workers, self.seed = num_workers, seed
        self.tokenizer = tokenizer  # given when resuming: the checkpoint's vocabulary wins
        self.splits: dict[str, Tensor] = {}

    def corpus_path(self) -> Path:
        return resolve_corpus(self.path, self.cache_dir, self.url, self.sha256)

    def prepare_data(self) -> None:
        self.corpus_path()  # downloads Tiny Shakespeare once; later runs read the cache

    def setup(self, stage: str | None = None) -> None:
        if self.splits:
            return
        text = read_text(self.corpus_path())
        if self.tokenizer is None:
            self.tokenizer = CharTokenizer.from_text(text)
        ids = self.tokenizer.encode(text)
        dtype = torch.uint8 if self.tokenizer.vocab_size <= 256 else torch.int32
        data = ids.to(dtype)  # 1 byte per character for Shakespeare
        n = len(data)
        n_test = int(n * self.test_fraction)
        n_val = int(n * self.val_fraction)
        n_train = n - n_val - n_test
        self.splits = {"train": data[:n_train], "val": data[n_train : n_train + n_val]}
        if n_test:
            self.splits["test"] = data[n_train + n_val :]
        # Fail now, with the fix, rather than at the first validation.
        ValidationWindows(self.splits["val"], self.context_window)
        RandomWindowBatches(self.splits["train"], self.context_window, self.batch_size)

    def _rank_and_world(self) -> tuple[int, int]:
        trainer = self.trainer
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    def batches_already_trained(self) -> int:
        """How many training batches a resumed run has consumed; 0 for a fresh run."""
        if self.trainer is None:
            return 0
        return self.trainer.fit_loop.epoch_loop.batch_progress.total.processed

    def train_dataloader(self) -> RandomWindowBatches:
        rank, _ = self._rank_and_world()
        return RandomWindowBatches(
            self.splits["train"], self.context_window, self.batch_size, self.seed, rank, self.batches_already_trained()
        )

    def _eval_loader(self, split: str) -> DataLoader:
        rank, world = self._rank_and_world()
        windows = ValidationWindows(self.splits[split], self.context_window, rank, world)
        return DataLoader(windows, batch_size=self.val_batch_size, shuffle=False, num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader("val")

    def test_dataloader(self) -> DataLoader:
        if "test" not in self.splits:
            raise ValueError("there is no test split: set data.test_fraction > 0 (e.g. 0.05)")
        return self._eval_loader("test")
