"""The corpus, the windows and the DataModule."""

import hashlib

import numpy as np
import pytest
import torch

from src.data.corpus import DataError, cached_corpus_path, resolve_corpus
from src.data.datamodule import EVAL_TOKENS_CPU, TextDataModule
from src.data.windows import IGNORE, RandomWindowBatches, ValidationWindows, validation_batches, windows_at
from tests.helpers import shakespeare_file

UNREACHABLE = "http://127.0.0.1:9/input.txt"  # the discard port: nothing listens, fails at once


def test_windows_are_the_text_shifted_by_one():
    data = np.arange(100)
    x, y = windows_at(data, torch.tensor([0, 37]), T=8)
    assert torch.equal(x[1], torch.arange(37, 45)) and torch.equal(y[1], torch.arange(38, 46))
    batches = RandomWindowBatches(data, T=8, batch_size=4, seed=1)
    x, y = next(iter(batches))
    assert x.shape == y.shape == (4, 8) and x.dtype == torch.long
    assert torch.equal(y[:, :-1], x[:, 1:])


def test_training_batches_depend_only_on_seed_rank_and_index():
    data = np.arange(1000)
    stream = iter(RandomWindowBatches(data, 16, 4, seed=3))
    first_five = [next(stream) for _ in range(5)]
    resumed = next(iter(RandomWindowBatches(data, 16, 4, seed=3, start_batch=3)))
    assert torch.equal(resumed[0], first_five[3][0])
    other_rank = next(iter(RandomWindowBatches(data, 16, 4, seed=3, rank=1)))
    assert not torch.equal(other_rank[0], first_five[0][0])


@pytest.mark.parametrize("n", [101, 97, 17, 33])
def test_validation_scores_every_position_exactly_once(n):
    data = np.arange(n)
    T = 16
    windows = ValidationWindows(data, T)
    scored = []
    for x, y in (windows[i] for i in range(len(windows))):
        assert torch.equal(x + 1, torch.where(y == IGNORE, x + 1, y))  # aligned wherever scored
        scored += y[y != IGNORE].tolist()
    assert sorted(scored) == list(range(1, n))  # each target once: exact loss


def test_validation_shards_cover_the_split_without_padding():
    data = np.arange(200)
    full = ValidationWindows(data, 16)
    shards = [ValidationWindows(data, 16, rank=r, world_size=3) for r in range(3)]
    assert sum(len(s) for s in shards) == len(full)
    targets = sorted(t for s in shards for i in range(len(s)) for t in s[i][1].tolist() if t != IGNORE)
    assert targets == list(range(1, 200))


def test_context_longer_than_the_validation_split_names_the_fix():
    with pytest.raises(ValueError, match=r"context_window \(64\) needs windows of 65 characters.*lower"):
        ValidationWindows(np.arange(50), 64)


def test_datamodule_splits_contiguously_without_overlap(tmp_path):
    dm = TextDataModule(
        context_window=32, batch_size=4, path=str(shakespeare_file()), cache_dir=str(tmp_path), test_fraction=0.05
    )
    dm.setup()
    text = shakespeare_file().read_text(encoding="utf-8")
    assert dm.tokenizer.vocab == sorted(set(text)) and dm.tokenizer.vocab_size == 65
    train, val, test = dm.splits["train"], dm.splits["val"], dm.splits["test"]
    assert train.dtype == np.uint8 and isinstance(train, np.memmap)  # one byte per character, on disk
    assert len(train) + len(val) + len(test) == len(text)
    assert len(val) == int(len(text) * 0.1) and len(test) == int(len(text) * 0.05)
    assert dm.tokenizer.decode(val[:50]) == text[len(train) : len(train) + 50]
    assert dm.tokenizer.decode(test[-20:]) == text[-20:]
    windows = dm.val_dataloader().dataset
    assert len(windows) == -(-(len(val) - 1) // 32)  # ceil: whole windows plus the tail
    x, _ = next(iter(dm.train_dataloader()))
    assert x.shape == (4, 32)


def test_default_corpus_is_downloaded_verified_and_cached(tmp_path):
    source = shakespeare_file()
    path = resolve_corpus(None, tmp_path, url=source.as_uri())  # file:// stands in for the web
    assert path == cached_corpus_path(tmp_path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == hashlib.sha256(source.read_bytes()).hexdigest()
    assert resolve_corpus(None, tmp_path, url=UNREACHABLE) == path  # cached: no second download
    assert [p.name for p in path.parent.iterdir()] == ["input.txt"]  # no temp file left behind


def test_no_network_says_where_to_put_the_file(tmp_path):
    with pytest.raises(DataError, match=r"could not download.*put the file at .*input\.txt or set data\.path="):
        resolve_corpus(None, tmp_path, url=UNREACHABLE)
    assert not cached_corpus_path(tmp_path).exists()


def test_a_download_with_the_wrong_checksum_is_refused(tmp_path):
    fake = tmp_path / "fake.txt"
    fake.write_text("not shakespeare")
    with pytest.raises(DataError, match="sha256"):
        resolve_corpus(None, tmp_path / "cache", url=fake.as_uri())
    assert not cached_corpus_path(tmp_path / "cache").exists()


def test_a_corrupt_cache_says_to_delete_it(tmp_path):
    cached = cached_corpus_path(tmp_path)
    cached.parent.mkdir(parents=True)
    cached.write_text("truncated")
    with pytest.raises(DataError, match="delete it to download it again"):
        resolve_corpus(None, tmp_path)


def test_any_utf8_text_works_through_path(tmp_path):
    text = tmp_path / "poem.txt"
    text.write_text("Shall I compare thee to a summer's day?\n" * 50, encoding="utf-8")
    dm = TextDataModule(context_window=8, batch_size=2, path=str(text), cache_dir=str(tmp_path))
    dm.setup()
    assert dm.tokenizer.vocab == sorted(set(text.read_text()))


@pytest.mark.parametrize(
    "content,message",
    [(b"", "is empty"), (b"\xff\xfe bad bytes", "not UTF-8")],
)
def test_empty_or_non_utf8_files_are_refused(tmp_path, content, message):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(content)
    with pytest.raises(DataError, match=message):
        TextDataModule(context_window=8, batch_size=2, path=str(bad), cache_dir=str(tmp_path)).setup()


def test_a_missing_path_names_the_option(tmp_path):
    with pytest.raises(DataError, match=r"data\.path=.*does not exist"):
        TextDataModule(context_window=8, batch_size=2, path=str(tmp_path / "nope.txt"), cache_dir=str(tmp_path)).setup()


@pytest.mark.parametrize("world_size", [1, 3])
def test_validation_batches_equal_the_windows_one_by_one(world_size):
    data = np.arange(203) % 50  # 202 targets: 12 whole windows of 16 and a tail
    for rank in range(world_size):
        windows = ValidationWindows(data, 16, rank, world_size)
        one_by_one = [windows[i] for i in range(len(windows))]
        batches = list(validation_batches(windows, batch_size=5))
        assert [len(x) for x, _ in batches] == [min(5, len(windows) - k) for k in range(0, len(windows), 5)]
        assert torch.equal(torch.cat([x for x, _ in batches]), torch.stack([x for x, _ in one_by_one]))
        assert torch.equal(torch.cat([y for _, y in batches]), torch.stack([y for _, y in one_by_one]))


def test_validation_batch_size_is_sized_by_tokens_unless_set(tmp_path):
    def datamodule(**kwargs):
        return TextDataModule(batch_size=4, path=str(shakespeare_file()), cache_dir=str(tmp_path), **kwargs)

    assert datamodule(context_window=64).eval_batch_size() == EVAL_TOKENS_CPU // 64  # no trainer: the CPU's
    assert datamodule(context_window=10).eval_batch_size() == EVAL_TOKENS_CPU // 10
    assert datamodule(context_window=4096).eval_batch_size() == 1
    assert datamodule(context_window=64, val_batch_size=7).eval_batch_size() == 7
    dm = datamodule(context_window=32, val_batch_size=7)
    dm.setup()
    assert next(iter(dm.val_dataloader()))[0].shape == (7, 32)
