"""FLOPs per token against a hand count and against PyTorch's FLOP counter; the MFU callback's numbers."""

import csv
import types

import lightning as L
import pytest
import torch
from lightning.fabric.utilities.throughput import measure_flops
from torch.utils.data import DataLoader, TensorDataset

from src.model import build_model
from src.training import callbacks
from src.training.callbacks import Throughput, compute_dtype, peak_flops
from src.training.flops import matmul_weights, training_flops_per_token
from src.training.gpt_module import GPTModule
from tests.helpers import scalars


def test_flops_per_token_of_a_small_gpt_by_hand():
    # vocab 11, d 16, 2 layers, MLP ratio 4, tied weights, window 12.
    model = build_model(dict(kind="gpt", context_window=12, embedding_dim=16, num_heads=4, num_layers=2), 11)
    per_layer = 4 * 16 * 16 + 2 * 16 * 64  # W_Q, W_K, W_V, W_O; W_1, W_2
    N = 2 * per_layer + 16 * 11  # + E as the LM head (its lookup costs nothing)
    assert matmul_weights(model) == N == 6320
    assert training_flops_per_token(model, 12) == 6 * N + 12 * 2 * 16 * 12 == 42_528


def test_flops_per_token_of_seed_gpt_by_hand():
    # vocab 11, d 12, one attention layer with W_O, W_out of 12 x 11; E is only looked up.
    model = build_model(dict(kind="seed", context_window=8, embedding_dim=12, num_heads=3), 11)
    N = 4 * 12 * 12 + 12 * 11
    assert matmul_weights(model) == N
    assert training_flops_per_token(model, 8) == 6 * N + 12 * 12 * 8


@pytest.mark.parametrize(
    "config",
    [
        dict(kind="gpt", context_window=12, embedding_dim=16, num_heads=4, num_layers=2, fused=False),
        dict(kind="gpt", context_window=12, embedding_dim=16, num_heads=4, num_layers=2, fused=True),
        dict(kind="gpt", context_window=10, embedding_dim=16, num_heads=2, num_layers=3, tie_weights=False, bias=True),
        dict(kind="gpt", context_window=12, embedding_dim=16, num_heads=4, num_layers=2, positional="learned"),
        dict(kind="seed", context_window=8, embedding_dim=12, num_heads=3, output_projection=False),
    ],
)
def test_the_formula_equals_torch_flop_counter_on_the_meta_device(config):
    """Every matmul of forward + backward, counted by torch's FlopCounterMode without running anything."""
    B, T = 3, config["context_window"]
    with torch.device("meta"):
        model = build_model(config, 11)
        idx = torch.randint(0, 11, (B, T))
    counted = measure_flops(model, lambda: model(idx, idx)[1], lambda loss: loss)
    assert counted == B * T * training_flops_per_token(model, T)


def test_compute_dtype_follows_lightning_precision():
    assert compute_dtype("32-true") == torch.float32
    assert compute_dtype("bf16-mixed") == compute_dtype("bf16-true") == torch.bfloat16
    assert compute_dtype("16-mixed") == torch.float16
    assert compute_dtype("64-true") == torch.float64


def test_a_cpu_has_a_peak_only_when_configured():
    assert peak_flops(torch.device("cpu"), "32-true", 2.5e11) == (2.5e11, "configured")
    peak, why = peak_flops(torch.device("cpu"), "32-true")
    assert peak is None and "callbacks.throughput.peak_flops" in why


@pytest.mark.parametrize("bad", [0, -1.0, True])
def test_a_bad_peak_is_refused_naming_the_key(bad):
    with pytest.raises(ValueError, match=r"peak_flops must be a positive FLOP/s figure"):
        Throughput(peak_flops=bad)


def fit_with_a_fake_clock(tmp_path, monkeypatch, peak: float | None, steps: int = 12, log_every: int = 3):
    """A tiny fit whose callbacks read a clock that moves 0.5 s per reading; the CSV log's values by name and step."""
    clock = iter(range(10_000))
    monkeypatch.setattr(callbacks, "time", types.SimpleNamespace(perf_counter=lambda: 0.5 * next(clock)))
    B, T, vocab = 4, 8, 11
    lit = GPTModule(
        model=dict(kind="gpt", context_window=T, embedding_dim=16, num_heads=2, num_layers=1),
        tokenizer={"vocab": "abcdefghijk"},
        optimizer=dict(name="adamw", lr=1e-3, betas=[0.9, 0.99], weight_decay=0.1, fused=False, warmup_steps=0),
    )
    ids = torch.randint(0, vocab, (B * steps, T + 1), generator=torch.Generator().manual_seed(0))
    data = DataLoader(TensorDataset(ids[:, :-1], ids[:, 1:]), batch_size=B)
    throughput = Throughput(peak_flops=peak)
    trainer = L.Trainer(
        max_steps=steps,
        log_every_n_steps=log_every,
        callbacks=[throughput],
        logger=L.pytorch.loggers.CSVLogger(tmp_path, name="run", version=""),
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    trainer.fit(lit, train_dataloaders=data)
    rows = list(csv.DictReader(open(tmp_path / "run" / "metrics.csv")))
    logged = {name: {int(r["step"]): float(r[name]) for r in rows if r.get(name)} for name in rows[0]}
    return logged, B * T * training_flops_per_token(lit.model, T), throughput


@pytest.mark.filterwarnings("ignore:.*(val_dataloader|LeafSpec).*")
def test_throughput_reads_the_clock_at_log_steps_only_and_logs_flops_and_mfu_there(tmp_path, monkeypatch):
    logged, flops_per_step, throughput = fit_with_a_fake_clock(tmp_path, monkeypatch, peak=1e8)
    assert logged["train/mfu"].keys() == {2, 5, 8, 11}  # Lightning's log steps
    assert logged["train/loss"].keys() == {0, 2, 5, 8, 11}  # and the untrained model's loss, at step 0
    # The clock was read when the first step started and then once per log step: 3 steps per 0.5 s.
    expected = 3 * flops_per_step / 0.5
    for step, achieved in logged["train/flops_per_sec"].items():
        assert achieved == pytest.approx(expected)
        assert logged["train/mfu"][step] == pytest.approx(achieved / 1e8)
    assert logged["train/tokens_per_sec"][11] == pytest.approx(3 * 4 * 8 / 0.5)
    assert throughput.overall == pytest.approx(3 * 4 * 8 / 0.5)  # result.json's figure: the same definition


@pytest.mark.filterwarnings("ignore:.*(val_dataloader|LeafSpec).*")
def test_mfu_is_never_shown_above_100_percent(tmp_path, monkeypatch, caplog):
    peak = 1e6  # below the ~4e6 FLOP/s the fake clock gives
    logged, flops_per_step, _ = fit_with_a_fake_clock(tmp_path, monkeypatch, peak=peak)
    assert 3 * flops_per_step / 0.5 > peak
    assert "train/mfu" not in logged and logged["train/flops_per_sec"].keys() == {2, 5, 8, 11}
    assert "above its configured peak" in caplog.text and "callbacks.throughput.peak_flops" in caplog.text


@pytest.mark.filterwarnings("ignore:.*(val_dataloader|LeafSpec).*")
def test_a_cpu_run_without_a_configured_peak_logs_flops_but_no_mfu(tmp_path, monkeypatch):
    logged, _, _ = fit_with_a_fake_clock(tmp_path, monkeypatch, peak=None)
    assert "train/mfu" not in logged and logged["train/flops_per_sec"].keys() == {2, 5, 8, 11}


@pytest.mark.slow
def test_a_cpu_training_run_logs_flops_but_no_mfu_to_tensorboard(trained):
    run_dir, output = trained
    s = scalars(run_dir)
    assert [step for step, _ in s["train/flops_per_sec"]] == [step for step, _ in s["loss/train"]]
    assert "train/mfu" not in s  # no stable peak on a CPU unless configured
    assert "MFU peak per device" not in output  # issue 47: every CPU run said it has no MFU
