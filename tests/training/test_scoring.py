"""Validation on every CPU core: the same losses as one forward pass, in the same order."""

from __future__ import annotations

import lightning as L
import pytest
import torch

from src.data.datamodule import TextDataModule
from src.data.windows import IGNORE
from src.model import build_model
from src.training import gpt_module
from src.training.gpt_module import MIN_PART_TOKENS, GPTModule, _workers, parts_and_threads, score, score_on_every_core

TINY = dict(kind="gpt", context_window=16, embedding_dim=32, num_heads=2, num_layers=2, fused=True)


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def windows(vocab: int = 11, batch: int = 140, T: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """A validation batch of 2,240 tokens: long enough for two parts of MIN_PART_TOKENS or more."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randint(0, vocab, (batch, T), generator=g), torch.randint(0, vocab, (batch, T), generator=g)
    y[-1, 9:] = IGNORE  # the split's last window is padded
    return x, y


def test_the_parts_hold_the_losses_and_predictions_of_one_pass(two_threads, kind):
    torch.manual_seed(0)
    config = TINY if kind == "gpt" else dict(kind="seed", context_window=16, embedding_dim=32, num_heads=2, fused=True)
    model = build_model(config, 11).eval()
    x, y = windows()
    with torch.inference_mode():
        whole = score(model, x, y)
        parts = score_on_every_core(model, x, y)
    assert len(parts) == 2  # one part per intra-op thread
    losses, predicted, targets = (torch.cat(column) for column in zip(*parts, strict=True))
    assert len(losses) == 140 * 16 - 7  # the padding is not scored
    torch.testing.assert_close(losses, whole[0], rtol=0, atol=1e-6)
    assert torch.equal(predicted, whole[1]) and torch.equal(targets, whole[2])


def test_parts_hold_enough_tokens_and_share_out_the_threads():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(16)
        assert parts_and_threads(torch.zeros(32, 64)) == (4, 4)  # 2,048 tokens: 4 parts of 4 threads
        assert parts_and_threads(torch.zeros(320, 64)) == (16, 1)
        assert parts_and_threads(torch.zeros(7, 64)) == (1, 16)  # too short to split: one pass
        assert parts_and_threads(torch.zeros(32, 64, device="meta")) == (1, 16)  # not on the CPU
        assert _workers(4, 4).submit(torch.get_num_threads).result() == 4
        torch.set_num_threads(2)
        assert parts_and_threads(torch.zeros(32, 64)) == (2, 1)
        assert parts_and_threads(torch.zeros(204, 10)) == (2, 1)  # the notes' window: 2,040 tokens
        assert parts_and_threads(torch.zeros(1, MIN_PART_TOKENS * 2)) == (1, 2)  # one window is not split
        torch.set_num_threads(1)
        assert parts_and_threads(torch.zeros(320, 64)) == (1, 1)  # a parallel sweep job's one thread
    finally:
        torch.set_num_threads(before)


def test_the_workers_keep_the_callers_grad_and_inference_mode(two_threads):
    model = build_model(TINY, 11)
    x, y = windows()
    with torch.inference_mode():
        assert all(part[0].is_inference() for part in score_on_every_core(model, x, y))
    with torch.no_grad():
        assert not any(part[0].requires_grad or part[0].is_inference() for part in score_on_every_core(model, x, y))
    assert all(part[0].requires_grad for part in score_on_every_core(model, x, y))


def test_autocast_and_a_single_window_are_scored_in_the_calling_thread(two_threads):
    model = build_model(TINY, 11).eval()
    x, y = windows()
    with torch.inference_mode():
        assert len(score_on_every_core(model, x[:1], y[:1])) == 1
        with torch.autocast("cpu", dtype=torch.bfloat16):
            parts = score_on_every_core(model, x, y)
    assert len(parts) == 1


def test_validation_is_the_mean_loss_of_every_position_scored_once(two_threads, tmp_path, monkeypatch):
    monkeypatch.setattr(gpt_module, "MIN_PART_TOKENS", 32)  # this short split's batches of 5 windows split in 2
    assert parts_and_threads(torch.zeros(5, 16)) == (2, 1)
    text = tmp_path / "text.txt"
    text.write_text("\ufeff春眠不覚暁、処処聞啼鳥。🌸🐦\r\nTo be, or not to be:\r\n" * 23, encoding="utf-8")
    data = TextDataModule(
        context_window=16, batch_size=4, val_batch_size=5, path=str(text), cache_dir=str(tmp_path / "cache"),
        val_fraction=0.3,
    )  # fmt: skip
    data.setup()
    torch.manual_seed(0)
    lit = GPTModule(TINY, data.tokenizer.to_dict(), {"name": "adamw", "lr": 1e-3})
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.validate(lit, datamodule=data, verbose=False)

    val = torch.tensor(data.scored("val"), dtype=torch.long)
    n, T = len(val) - 1, 16  # n targets
    assert n % T, "the split must end in a partial window, to check the tail"
    losses = []
    with torch.inference_mode():
        for start in [*range(0, n - T + 1, T), n - T]:  # whole windows, then the last T positions
            logits, _ = lit.model(val[start : start + T][None])
            targets = val[start + 1 : start + T + 1]
            losses.append(torch.nn.functional.cross_entropy(logits[0], targets, reduction="none"))
    losses[-1] = losses[-1][T - n % T :]  # the tail's first targets were scored by the last whole window
    exact = torch.cat(losses)
    assert len(exact) == n
    assert trainer.callback_metrics["val/loss"].item() == pytest.approx(exact.mean().item(), abs=1e-6)
