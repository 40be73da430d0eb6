"""The token cache: streamed encoding, reuse, rebuilds, atomicity, and texts of every kind."""

import json
import os
import re
import subprocess
import sys

import lightning as L
import numpy as np
import pytest
import torch

from src.data import token_encode
from src.data.corpus import DataError
from src.data.datamodule import TextDataModule
from src.data.token_cache import cache_key, load, open_corpus
from src.data.token_encode import encode
from src.data.tokenizer import CharTokenizer
from src.data.windows import RandomWindowBatches
from src.training.gpt_module import GPTModule
from tests.helpers import shakespeare_file

MIXED = "héllo wörld, 日本語のテキスト 😀🎭 ok\n" * 40  # 1- to 4-byte characters


def write(tmp_path, content: bytes | str, name: str = "text.txt"):
    path = tmp_path / name
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return path


@pytest.mark.parametrize("chunk_bytes", [1, 2, 3, 5, 7, 64])
def test_characters_cut_by_a_chunk_boundary_are_decoded_whole(tmp_path, chunk_bytes):
    source = write(tmp_path, MIXED)
    encode(source, tmp_path / "cache" / "c", chunk_bytes=chunk_bytes)
    corpus = load(tmp_path / "cache" / "c")
    tokenizer = CharTokenizer.from_text(MIXED)
    assert corpus.vocab == tokenizer.vocab
    assert np.array_equal(corpus.tokens, tokenizer.encode(MIXED).numpy())
    meta = json.loads((corpus.directory / "meta.json").read_text(encoding="utf-8"))
    assert meta["num_tokens"] == len(MIXED) and meta["source"]["size"] == source.stat().st_size


def test_the_vocabulary_size_picks_the_token_width(tmp_path):
    small = open_corpus(write(tmp_path, "abc" * 10, "a.txt"), tmp_path)
    cjk = open_corpus(write(tmp_path, "".join(chr(0x4E00 + i) for i in range(300)) * 2, "b.txt"), tmp_path)
    huge = "".join(chr(c) for c in range(0x20000, 0x20000 + 70_000))  # beyond 65,536 characters
    wide = open_corpus(write(tmp_path, huge, "c.txt"), tmp_path)
    assert (small.tokens.dtype, cjk.tokens.dtype, wide.tokens.dtype) == (np.uint8, np.uint16, np.uint32)
    assert wide.tokens[-1] == 69_999 and "".join(wide.vocab[i] for i in wide.tokens[:3]) == huge[:3]


def test_a_cache_is_reused_and_rebuilt_when_its_source_changes(tmp_path, monkeypatch):
    source = write(tmp_path, "first version of the text\n" * 20)
    first = open_corpus(source, tmp_path)
    calls = []
    monkeypatch.setattr(token_encode, "encode", lambda *a, **k: calls.append(a))
    again = open_corpus(source, tmp_path)
    assert again.directory == first.directory and calls == []  # memory-mapped, not encoded
    monkeypatch.undo()
    source.write_text("the second version: other words\n" * 20)
    os.utime(source, ns=(source.stat().st_atime_ns, source.stat().st_mtime_ns + 10**9))
    changed = open_corpus(source, tmp_path)
    assert changed.directory != first.directory
    assert "".join(changed.vocab[i] for i in changed.tokens[:10]) == "the second"
    assert not first.directory.exists()  # the outdated cache is removed


def test_an_interrupted_encode_leaves_no_usable_cache(tmp_path, monkeypatch):
    source = write(tmp_path, MIXED)
    directory = tmp_path / "tokens" / cache_key(source)

    def interrupted(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(token_encode.os, "fsync", interrupted)  # Ctrl-C while the tokens are flushed
    with pytest.raises(KeyboardInterrupt):
        open_corpus(source, tmp_path)
    assert list((tmp_path / "tokens").iterdir()) == []  # neither the cache nor its temporary directory
    monkeypatch.undo()
    assert np.array_equal(open_corpus(source, tmp_path).tokens, CharTokenizer.from_text(MIXED).encode(MIXED).numpy())
    assert load(directory) is not None


def test_a_killed_encode_is_never_read_and_its_leftovers_are_removed(tmp_path):
    source = write(tmp_path, MIXED)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    key = cache_key(source)
    import socket

    leftover = tmp_path / "tokens" / f".tmp-{key}~{socket.gethostname()}~{dead.stdout.strip()}~deadbeef"
    leftover.mkdir(parents=True)
    (leftover / "tokens.bin").write_bytes(b"\x00" * 7)  # what a kill -9 mid-write leaves
    corpus = open_corpus(source, tmp_path)
    assert corpus.directory.name == key and not leftover.exists()
    truncated = corpus.directory / "tokens.bin"  # a cache damaged later on is rebuilt, not read
    truncated.write_bytes(truncated.read_bytes()[:-5])
    assert load(corpus.directory) is None
    assert open_corpus(source, tmp_path).num_tokens == len(MIXED)


def test_a_non_utf8_byte_is_reported_at_its_offset_in_any_chunk(tmp_path):
    source = write(tmp_path, "a" * 10 + "é" + "b" * 5)
    source.write_bytes(source.read_bytes()[:-3] + b"\xff" + b"bb")
    with pytest.raises(DataError, match=r"not UTF-8 text \(byte 14 is invalid\): convert it to UTF-8"):
        encode(source, tmp_path / "c", chunk_bytes=4)
    truncated = write(tmp_path, b"abc" + "é".encode()[:1], "cut.txt")  # ends inside a character
    with pytest.raises(DataError, match="byte 3 is invalid"):
        encode(truncated, tmp_path / "d", chunk_bytes=2)
    assert not (tmp_path / "c").exists() and not (tmp_path / "d").exists()


def test_memmapped_windows_equal_the_in_memory_windows_of_before(tmp_path):
    """The batches of a seed are those the in-RAM tensor of earlier versions gave."""
    dm = TextDataModule(context_window=16, batch_size=8, path=str(shakespeare_file()), cache_dir=str(tmp_path))
    dm.setup()
    text = shakespeare_file().read_text(encoding="utf-8")
    in_ram = CharTokenizer.from_text(text).encode(text).to(torch.uint8)[: len(dm.splits["train"])]
    stream = RandomWindowBatches(dm.splits["train"], 16, 8, seed=7, rank=1)
    for k in (0, 1, 999):
        generator = torch.Generator().manual_seed((7 * 65_537 + 1) * 1_000_000_007 + k)
        starts = torch.randint(0, len(in_ram) - 16, (8,), generator=generator)
        chunk = in_ram[starts.unsqueeze(1) + torch.arange(17)].long()
        x, y = stream.batch(k)
        assert torch.equal(x, chunk[:, :-1]) and torch.equal(y, chunk[:, 1:])


def test_validation_covers_the_configured_span(tmp_path):
    kwargs = dict(context_window=16, batch_size=8, path=str(shakespeare_file()), cache_dir=str(tmp_path))
    capped = TextDataModule(**kwargs, val_tokens=1000)
    capped.setup()
    assert len(capped.val_dataloader().dataset.data) == 1000
    assert "val/loss over its first 1,000" in capped.describe()
    default = TextDataModule(**kwargs, val_tokens=120_000)  # the config's default
    default.setup()
    assert len(default.val_dataloader().dataset.data) == 111_539  # all of Tiny Shakespeare's val split
    assert "val/loss over all of it" in default.describe()
    whole = TextDataModule(**kwargs, val_fraction=0.3, val_tokens=None)  # what src.evaluate scores
    whole.setup()
    assert len(whole.val_dataloader().dataset.data) == len(whole.splits["val"]) == int(0.3 * 1_115_394)
    with pytest.raises(ValueError, match=r"data\.val_tokens \(16\) must exceed model\.context_window"):
        TextDataModule(**kwargs, val_tokens=16)


def train_briefly(dm: TextDataModule, steps: int = 60) -> float:
    """Train a tiny model on the datamodule in-process; return the final val loss."""
    dm.setup()
    lit = GPTModule(
        model={"kind": "seed", "context_window": dm.context_window, "embedding_dim": 16, "num_heads": 2},
        tokenizer=dm.tokenizer.to_dict(),
        optimizer={"name": "adamw", "lr": 3e-2, "warmup_steps": 0, "min_lr": 3e-3, "weight_decay": 0.0},
    )
    trainer = L.Trainer(
        max_steps=steps,
        val_check_interval=steps,
        check_val_every_n_epoch=None,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        use_distributed_sampler=False,
    )
    trainer.fit(lit, datamodule=dm)
    return lit.best_val_loss


TEXTS = {
    "lower-case": "to be or not to be that is the question\n" * 60,
    "cjk and emoji": "春眠不覚暁、処処聞啼鳥。🌸🐦 夜来風雨声\n" * 60,
    "crlf": "First line.\r\nSecond line!\r\n" * 80,
    "bom": "\ufeffA text saved with a byte-order mark.\n" * 60,
}


@pytest.mark.slow
@pytest.mark.parametrize("name", TEXTS)
def test_texts_of_every_kind_train_end_to_end(tmp_path, name):
    source = write(tmp_path, TEXTS[name])
    dm = TextDataModule(context_window=8, batch_size=8, path=str(source), cache_dir=str(tmp_path))
    loss = train_briefly(dm)
    vocab = sorted(set(TEXTS[name].lstrip("\ufeff")))  # the byte-order mark is not text
    assert dm.tokenizer.vocab == vocab
    assert loss < 0.75 * np.log(len(vocab))  # it learned: well below uniform guessing


@pytest.mark.parametrize(
    "content,message",
    [
        ("aaaa" * 100, r"only one distinct character \('a'\).*at least two different characters"),
        ("\n" * 400, r"only one distinct character \('\\n'\)"),
        ("tiny text\n", r"context_window \(8\) needs windows of 9 characters.*lower model\.context_window"),
        ("\ufeff", "is empty"),
    ],
)
def test_texts_that_cannot_train_are_refused_with_the_fix(tmp_path, content, message):
    source = write(tmp_path, content)
    with pytest.raises(ValueError, match=message):
        TextDataModule(context_window=8, batch_size=8, path=str(source), cache_dir=str(tmp_path)).setup()


def test_a_checkpoint_vocabulary_encodes_a_text_with_fewer_characters(tmp_path):
    """Evaluating or resuming on another text uses the model's ids, in a cache of its own."""
    source = write(tmp_path, "abba cab\n" * 20)
    vocab = sorted(set("abcdef \n"))
    corpus = open_corpus(source, tmp_path, vocab)
    assert corpus.vocab == vocab and "".join(vocab[i] for i in corpus.tokens[:4]) == "abba"
    assert open_corpus(source, tmp_path).vocab == sorted(set("abba cab\n"))  # the text's own cache
    with pytest.raises(DataError, match=r"1 character\(s\) not in the checkpoint's vocabulary: 'c'"):
        open_corpus(source, tmp_path, sorted(set("ab \n")))


def test_an_unwritable_cache_directory_names_the_option(tmp_path):
    source = write(tmp_path, MIXED)
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder should go")
    with pytest.raises(DataError, match=r"cannot write the token cache of text\.txt.*set data\.cache_dir"):
        open_corpus(source, blocker)


@pytest.mark.slow
def test_a_run_resumed_on_a_text_with_fewer_characters_trains_on_it_with_the_checkpoints_ids(tmp_path):
    """The plan hands the DataModule the text encoded with the checkpoint's vocabulary, not its own."""
    from src.run import preflight
    from src.train import train
    from tests.helpers import compose_training

    wide = write(tmp_path, "abcdefgh xyz\n" * 300, "wide.txt")
    narrow = write(tmp_path, "zyx cab\n" * 300, "narrow.txt")  # fewer characters, in other positions
    run = tmp_path / "run"
    tiny = ("trainer.max_steps=4", "trainer.val_check_interval=4", "sample.max_new_tokens=0", "data.val_fraction=0.1")
    train(compose_training(run, *tiny, data=wide))
    cfg = compose_training(run, *tiny, "trainer.max_steps=6", f"ckpt_path={run}", "finetune=true", data=narrow)
    plan = preflight.plan(cfg)
    assert plan.tokenizer.vocab == plan.corpus.vocab == sorted(set("abcdefgh xyz\n"))
    assert plan.tokenizer.decode(plan.corpus.tokens[:8].tolist()) == "zyx cab\n"
    assert np.isfinite(train(cfg))


def damage_meta(directory, change) -> None:
    meta_file = directory / "meta.json"
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    change(meta)
    meta_file.write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")


@pytest.mark.parametrize(
    "damage,reason",
    [
        ("ids", r"id 255 is outside its vocabulary"),  # tokens.bin overwritten at the same size
        ("reversed vocabulary", r"its vocabulary is not sorted and distinct"),
        ("another source", r"it records another source"),
        ("zeroed", r"tokens\.bin is not what was written"),  # issue 37: trained on 40,000 newlines, val acc 1.0
        ("edited in place", r"text\.txt changed since it was encoded"),  # issue 37: the stale cache was used
    ],
)
def test_a_damaged_cache_is_reported_and_encoded_again(tmp_path, capsys, damage, reason):
    """Issue 25: 0xFF ids were an IndexError mid-training, forever; a reversed vocabulary trained
    silently with the wrong tokenizer."""
    source = write(tmp_path, MIXED)
    corpus = open_corpus(source, tmp_path)
    if damage == "ids":
        tokens = corpus.directory / "tokens.bin"
        tokens.write_bytes(b"\xff" * tokens.stat().st_size)
    elif damage == "zeroed":  # what a crash can leave of an unsynced write
        tokens = corpus.directory / "tokens.bin"
        tokens.write_bytes(bytes(tokens.stat().st_size))
    elif damage == "edited in place":  # the same size, its modification time set back
        stat = source.stat()
        source.write_text(MIXED.replace("ok", "OK"), encoding="utf-8")
        os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    elif damage == "reversed vocabulary":
        damage_meta(corpus.directory, lambda meta: meta.update(vocab=meta["vocab"][::-1]))
    else:
        damage_meta(corpus.directory, lambda meta: meta["source"].update(path=str(tmp_path / "other.txt")))
    capsys.readouterr()
    again = open_corpus(source, tmp_path)
    assert re.search(rf"warning: the token cache .* is damaged \({reason}", capsys.readouterr().err)
    text = source.read_text(encoding="utf-8")
    assert np.array_equal(again.tokens, CharTokenizer.from_text(text).encode(text).numpy())
    assert again.vocab == CharTokenizer.from_text(text).vocab
    open_corpus(source, tmp_path)
    assert capsys.readouterr().err == ""  # rebuilt once, then trusted


def test_a_checkpoint_vocabulary_cache_must_hold_that_vocabulary(tmp_path, capsys):
    source = write(tmp_path, "abba cab\n" * 20)
    vocab = sorted(set("abcdef \n"))
    corpus = open_corpus(source, tmp_path, vocab)
    damage_meta(corpus.directory, lambda meta: meta.update(vocab="".join(sorted(set("abcdeg \n")))))
    again = open_corpus(source, tmp_path, vocab)
    assert "its vocabulary is not the checkpoint's" in capsys.readouterr().err
    assert again.vocab == vocab and "".join(vocab[i] for i in again.tokens[:4]) == "abba"
