"""`python -m src.export` as a user runs it, with the network blocked in every command: a tiny GPT
trained on a text with CJK and emoji, exported to each format and opened by transformers, by
TransformerLens and by our own commands, which must give the same characters and numbers; and every
bad input refused in one line, exit 2, with nothing written. The export command runs once as a
process (the first test); the rest call the commands' main() in this process (run_main_offline)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from src.export.__main__ import write_atomically
from src.training.checkpoint import load_trained
from tests.helpers import ROOT, block_network, run_cli_offline, run_main_offline, shakespeare_file

pytestmark = pytest.mark.slow
PROMPT = "ROMEO:"
EXTRA = "春眠不覚暁 🙂🎭 処処聞啼鳥\n"  # CJK and emoji (the emoji outside the Basic Multilingual Plane)


def training(log_dir: Path, text: Path, *extra: str) -> list[str]:
    return [
        "trainer.accelerator=cpu",
        f"paths.log_dir={log_dir}",
        f"data.path={text}",
        "model.context_window=112",  # the prompt and 100 greedy characters fit: GPT-2 never slides its window
        "model.embedding_dim=32",
        "model.num_heads=4",
        "model.num_layers=2",
        "data.batch_size=8",
        "data.val_fraction=0.1",
        "trainer.max_steps=40",
        "optimizer.lr=1e-2",
        "optimizer.warmup_steps=5",
        "trainer.val_check_interval=20",
        "sample.max_new_tokens=0",
        "explorer=false",
        "progress_bar=false",
        *extra,
    ]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A tiny GPT trained on Shakespeare's opening with CJK and emoji lines among it: its run directory."""
    root = tmp_path_factory.mktemp("export")
    text = root / "mixed.txt"
    opening = shakespeare_file().read_text(encoding="utf-8")[:20000]
    text.write_text("".join(line + EXTRA for line in opening.split("\n")[:400]), encoding="utf-8")
    run_dir = root / "run"
    result = run_main_offline("train", *training(root, text, f"hydra.run.dir={run_dir}"))
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, name, getattr(socket.socket, name))
    monkeypatch.setattr(socket, "getaddrinfo", socket.getaddrinfo)
    block_network()


def export(run_dir: Path, fmt: str, out: Path, *extra: str):
    return run_main_offline("export", f"ckpt_path={run_dir}", f"format={fmt}", f"out={out}", *extra)


def test_transformers_greedy_generate_equals_ours_and_the_tokenizer_round_trips(run: Path, tmp_path: Path, offline):
    from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast

    out = tmp_path / "hf"
    exported = run_cli_offline("export", f"ckpt_path={run}", "format=hf", f"out={out}")  # the process, once
    assert exported.returncode == 0, exported.stderr
    ours = run_main_offline("generate", f"ckpt_path={run}", f"prompt={PROMPT}", "greedy=true", "max_new_tokens=100")
    assert ours.returncode == 0, ours.stderr
    model = GPT2LMHeadModel.from_pretrained(out).eval()
    tokenizer = PreTrainedTokenizerFast.from_pretrained(out)
    prompt_ids = tokenizer(PROMPT, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        generated = model.generate(prompt_ids, max_new_tokens=100, min_new_tokens=100, do_sample=False)
    theirs = tokenizer.decode(generated[0])
    assert len(theirs) == len(PROMPT) + 100
    assert ours.stdout == theirs + "\n"

    vocab = load_trained(run / "checkpoints" / "best.ckpt").tokenizer.vocab
    assert {"春", "暁", "🙂", "🎭", "\n", " "} <= set(vocab)
    every = "".join(vocab)
    assert tokenizer(every)["input_ids"] == list(range(len(vocab)))
    assert tokenizer.decode(list(range(len(vocab)))) == every
    assert [tokenizer.decode([i]) for i in range(len(vocab))] == vocab


def test_transformerlens_export_boots_with_our_logits_and_patterns(run: Path, tmp_path: Path, offline):
    from src.export.lens import boot

    out = tmp_path / "lens"
    exported = export(run, "transformerlens", out)
    assert exported.returncode == 0, exported.stderr
    trained = load_trained(run / "checkpoints" / "best.ckpt")
    bridge = boot(out)
    ids = bridge.to_tokens("ROMEO:\n春眠不覚暁 🙂")
    with torch.no_grad():
        logits, cache = bridge.run_with_cache(ids)
        ours, _ = trained.model(ids)
        weights = trained.model.attention_maps(ids)
    assert torch.allclose(logits, ours, atol=1e-5, rtol=0)
    for layer, w in enumerate(weights):
        assert torch.allclose(cache["pattern", layer], w, atol=1e-6, rtol=0)


def test_safetensors_round_trip_gives_the_same_samples_and_val_loss(run: Path, tmp_path: Path):
    out = tmp_path / "weights"
    exported = export(run, "safetensors", out)
    assert exported.returncode == 0, exported.stderr
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    assert not list(tmp_path.glob(".*partial*"))  # the temporary folder was renamed, not left beside it
    samples = [run_main_offline("generate", f"ckpt_path={s}", "num_samples=2", "max_new_tokens=80") for s in (run, out)]
    assert samples[0].stdout == samples[1].stdout and len(samples[0].stdout) > 160
    scores = [run_main_offline("evaluate", f"ckpt_path={source}") for source in (run, out)]
    assert all(s.returncode == 0 for s in scores), scores[1].stderr
    val = [next(line for line in s.stdout.splitlines() if line.startswith("val ")) for s in scores]
    assert val[0] == val[1]  # loss, bpc, perplexity and accuracy over the same characters
    assert "(step 40, best val loss" in scores[1].stderr  # the step and val loss travel in config.json


def refused(result, *words: str) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


def test_an_untrusted_file_sizes_nothing_before_it_is_checked(run: Path, tmp_path: Path):
    """Issue 48: a checkpoint or export whose config said model.context_window=2**31 built its 16 GiB position
    table before any check (parameters were bounded, buffers were not); an export's "step": "abc" was a
    traceback."""
    exported = tmp_path / "weights"
    assert export(run, "safetensors", exported).returncode == 0
    config = json.loads((exported / "config.json").read_text())
    huge = {**config["model"], "context_window": 2**31}
    for edit, words in [
        ({"step": "abc"}, ["step='abc'", "export the model again"]),
        ({"step": None}, ["step=None"]),
        ({"best_val_loss": "low"}, ["best_val_loss='low'"]),
        ({"model": huge}, ["model.context_window=2147483648", "GiB"]),
    ]:
        (exported / "config.json").write_text(json.dumps({**config, **edit}))
        refused(run_main_offline("generate", f"ckpt_path={exported}"), *words)
    checkpoint = torch.load(run / "checkpoints" / "best.ckpt", weights_only=False)
    for positional in ("sinusoidal", "rope"):
        checkpoint["hyper_parameters"]["model"] |= {"context_window": 2**31, "positional": positional}
        torch.save(checkpoint, tmp_path / "huge.ckpt")
        for command in ("generate", "evaluate", "explore"):
            refused(run_main_offline(command, f"ckpt_path={tmp_path / 'huge.ckpt'}"), "model.context_window=2147483648")


def test_bad_input_is_refused_in_one_line_with_nothing_written(run: Path, tmp_path: Path):
    out = tmp_path / "out"
    refused(export(run, "onnx", out), "format", "onnx", "safetensors, hf, transformerlens")
    refused(export(run, "hf", Path("/proc/scratchgpt-export")), "cannot write out=/proc/scratchgpt-export")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    refused(export(run, "safetensors", tmp_path / "taken"), "already holds files")
    assert (tmp_path / "taken" / "notes.txt").read_text() == "mine"

    broken = tmp_path / "broken"
    (broken / "checkpoints").mkdir(parents=True)
    data = (run / "checkpoints" / "best.ckpt").read_bytes()
    (broken / "checkpoints" / "best.ckpt").write_bytes(data[: len(data) // 2])
    refused(export(broken, "safetensors", out), "truncated or corrupt")

    exported = tmp_path / "weights"
    assert export(run, "safetensors", exported).returncode == 0
    resumed = run_main_offline("train", f"ckpt_path={exported}", "trainer.max_steps=80")
    refused(resumed, "is an exported model", "resume from the run's checkpoints/last.ckpt")
    damaged = exported / "model.safetensors"
    damaged.write_bytes(damaged.read_bytes()[:-100])
    refused(run_main_offline("generate", f"ckpt_path={exported}"), "model.safetensors", "truncated or corrupt")

    seed_run = tmp_path / "seed"
    seed = ["model=seed", "model.context_window=8", "model.embedding_dim=20", "trainer.max_steps=4"]
    seed += ["trainer.val_check_interval=2", f"hydra.run.dir={seed_run}", f"paths.log_dir={tmp_path}"]
    seed += ["trainer.accelerator=cpu", f"data.path={shakespeare_file()}", "data.val_fraction=0.02"]
    seed += ["sample.max_new_tokens=0", "explorer=false", "progress_bar=false"]
    trained = run_main_offline("train", *seed)
    assert trained.returncode == 0, trained.stderr[-2000:]
    refused(export(seed_run, "hf", out), "model=seed", "format=hf")
    refused(export(seed_run, "transformerlens", out), "model=seed", "format=transformerlens")
    assert not out.exists() and not list(tmp_path.glob(".*partial*"))
    shutil.rmtree(seed_run)

    smeared_run = tmp_path / "smeared"  # GPT-2 has no place for the smeared keys' alpha_h
    smeared = [s for s in seed if s != "model=seed" and not s.startswith("hydra.run.dir")]
    smeared += ["model.smeared_keys=true", "model.num_layers=1", f"hydra.run.dir={smeared_run}"]
    trained = run_main_offline("train", *smeared)
    assert trained.returncode == 0, trained.stderr[-2000:]
    refused(export(smeared_run, "hf", out), "model.smeared_keys=True cannot be exported as format=hf")
    refused(export(smeared_run, "transformerlens", out), "model.smeared_keys=True", "format=transformerlens")
    assert not out.exists()
    assert export(smeared_run, "safetensors", out).returncode == 0  # its own format holds it


def test_an_export_finished_by_another_meanwhile_is_refused_and_theirs_kept(tmp_path: Path):
    """Issue 48: two exports into one out= at once: the second rename met the first's folder, a raw
    `[Errno 39] Directory not empty`."""
    out = tmp_path / "out"

    def write(folder: Path) -> None:
        (folder / "model.safetensors").write_text("ours")
        out.mkdir()  # the other export finished meanwhile
        (out / "config.json").write_text("theirs")

    with pytest.raises(ValueError, match=r"out=.* was filled by another export while this one ran"):
        write_atomically(out, write)
    assert [p.name for p in out.iterdir()] == ["config.json"] and not list(tmp_path.glob(".out.partial-*"))


@pytest.mark.slow
def test_sigterm_during_an_export_ends_in_one_line_and_leaves_nothing(run: Path, tmp_path: Path):
    """Issue 48: SIGTERM during export exited 143 with no line, its partial folder left behind."""
    out = tmp_path / "out"
    command = [sys.executable, "-m", "src.export", f"ckpt_path={run}", "format=hf", f"out={out}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}
    export = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    first = export.stderr.readline()  # what it exports: the checkpoint is read, the writing begins
    export.send_signal(signal.SIGTERM)
    _, rest = export.communicate(timeout=120)
    assert export.returncode == 143, first + rest
    assert (first + rest).strip().splitlines()[-1] == "error: stopped by SIGTERM before export finished"
    assert list(tmp_path.iterdir()) == []  # neither out nor its partial folder
