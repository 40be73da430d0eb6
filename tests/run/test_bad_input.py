"""Every bad input ends in one line that names the fix, a non-zero exit, and nothing written."""

import errno
import io
import logging
import os
import re
import shutil
from pathlib import Path

import pytest
import torch

from src.run import preflight
from src.run.cli import compose, fail
from src.run.rundir import continue_run
from src.train import main as train_main
from tests.helpers import (
    assert_refused,
    compose_training,
    hide_gpus,
    run_cli,
    run_in_process,
    run_main,
    shakespeare_file,
    tiny_training,
)


def files_under(directory: Path) -> set[Path]:
    return set(directory.rglob("*")) if directory.exists() else set()


@pytest.fixture
def workspace(tmp_path) -> Path:
    """A log dir for the run and a few broken data files beside it."""
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "latin1.txt").write_bytes("Où est le café?".encode("latin-1"))
    (tmp_path / "cache" / "tinyshakespeare").mkdir(parents=True)
    (tmp_path / "cache" / "tinyshakespeare" / "input.txt").write_text("a truncated download")
    (tmp_path / "not.ckpt").write_text("hello")
    (tmp_path / "outputs").mkdir()
    return tmp_path


TRAIN_CASES = {
    "unknown key": (["model.hidden_size=64"], r"unknown config key 'model.hidden_size'.*embedding_dim"),
    "unknown option": (["model=transformer"], r"unknown option 'transformer' for model: choose one of gpt, seed"),
    "a schema is no option": (["model=gpt_schema"], r"unknown option 'gpt_schema' for model: choose one of gpt, seed"),
    "heads do not divide": (["model.embedding_dim=64", "model.num_heads=6"], r"embedding_dim \(64\).*num_heads \(6\)"),
    "context_window 0": (["model.context_window=0"], r"context_window must be a positive integer"),
    "embedding_dim negative": (["model.embedding_dim=-8"], r"embedding_dim must be a positive integer"),
    "num_heads 0": (["model.num_heads=0"], r"num_heads must be a positive integer"),
    "num_layers 0": (["model.num_layers=0"], r"num_layers must be a positive integer"),
    "batch_size 0": (["data.batch_size=0"], r"batch_size must be a positive integer"),
    "window longer than val": (["model.context_window=50000"], r"more than the validation split.*lower model"),
    "data file missing": (["data.path={ws}/missing.txt"], r"does not exist.*data\.path"),
    "data file empty": (["data.path={ws}/empty.txt"], r"is empty"),
    "data not UTF-8": (["data.path={ws}/latin1.txt"], r"not UTF-8"),
    "corpus checksum": (["data.path=null", "paths.data_dir={ws}/cache"], r"sha256.*delete it to download it again"),
    "no network": (
        ["data.path=null", "paths.data_dir={ws}/fresh", "data.url=http://127.0.0.1:9/input.txt"],
        r"could not download.*put the file at .*input\.txt or set data\.path",
    ),
    "checkpoint missing": (["ckpt_path={ws}/nope.ckpt"], r"does not exist"),
    "not a checkpoint": (["ckpt_path={ws}/not.ckpt"], r"is not a checkpoint"),
    "gpu without gpu": (["trainer=gpu"], r"asks for a GPU but none is available: use trainer=cpu"),
    "output not writable": (["paths.log_dir=/proc/scratchgpt-outputs"], r"cannot write the run to .*paths\.log_dir"),
    # Issue 25: each of these was a traceback, or refused only after the run directory existed.
    "model.kind switched alone": (["model.kind=seed"], r"model.kind=seed keeps the options of the gpt model.*=seed"),
    "model.kind unknown": (["model.kind=rnn"], r"model.kind must be one of gpt, seed, got 'rnn'"),
    "model key added": (["+model.foo=1"], r"unknown config key 'model.foo': the gpt model has: .*num_heads"),
    "accelerator mps": (["trainer.accelerator=mps"], r"trainer.accelerator=mps is not available on this machine"),
    "accelerator tpu": (["trainer.accelerator=tpu"], r"trainer.accelerator=tpu is not available on this machine"),
    "ddp without gpu": (["trainer=ddp"], r"trainer.accelerator=gpu \(trainer=gpu, trainer=ddp\).*trainer=ddp_cpu"),
    "devices 0": (["trainer.devices=0"], r"^error: trainer.devices=0: Trainer refuses it"),
    "precision": (["trainer.precision=bogus"], r"^error: trainer.precision=bogus: Trainer refuses it: .*bf16-mixed"),
    "no checkpointing": (["trainer.enable_checkpointing=false"], r"trainer.enable_checkpointing must be true"),
    "no training batches": (["trainer.limit_train_batches=0"], r"trainer.limit_train_batches must be null.*max_steps"),
    "val_tokens 0": (["data.val_tokens=0"], r"data.val_tokens must be a positive integer"),
    "val_tokens below a window": (["data.val_tokens=10"], r"data.val_tokens \(10\) must exceed model.context_window"),
    "sampling": (["data.sampling=sequential"], r"data.sampling must be one of random, epoch"),
    "every_n_train_steps 0": (
        ["callbacks.last_checkpoint.every_n_train_steps=0"],
        r"callbacks.last_checkpoint.every_n_train_steps must be a positive integer",
    ),
    "peak_flops 0": (["callbacks.throughput.peak_flops=0"], r"callbacks.throughput.peak_flops must be a positive"),
    "head scores path a folder": (["callbacks.head_scores.path=."], r"callbacks.head_scores.path must name a file"),
    "callback option added": (
        ["+callbacks.sample_text.foo=1"],
        r"unknown config key 'callbacks.sample_text.foo': SampleText has: ",
    ),
    "callback value of another type": (
        ["callbacks.model_checkpoint.filename=1"],
        r"filename must be null or of type str",
    ),
    "callback class missing": (["+callbacks.x._target_=nope.X"], r"callbacks.x._target_=nope.X cannot be imported"),
    "optimizer name": (["optimizer.name=adam"], r"optimizer.name must be one of adamw, sgd"),
    "optimizer name switched alone": (["optimizer.name=sgd"], r"optimizer.name=sgd keeps the options.*optimizer=sgd"),
    "optimizer key added": (["+optimizer.extra=0"], r"unknown config key 'optimizer.extra': optimizer=adamw has: .*lr"),
    "final sample beyond memory": (
        ["sample.max_new_tokens=1000000000000"],
        r"sample.max_new_tokens=1000000000000 would hold about [\d,]+ GiB of sampled text",
    ),
    "callback sample beyond memory": (
        ["callbacks.sample_text.max_new_tokens=1000000000000"],
        r"callbacks.sample_text.max_new_tokens=1000000000000 would hold about",
    ),
    "a group set to null": (
        ["logger=null"],
        r"^error: logger=null: a config group takes one of its options: "
        r"csv, many, mlflow, tensorboard, wandb or ~logger",
    ),
    "fast_dev_run nan": (["trainer.fast_dev_run=nan"], r"trainer.fast_dev_run must be of type int or bool, got nan"),
    "monitor": (["callbacks.model_checkpoint.monitor=abc"], r"monitor must be one of val/loss, val/ppl, val/bpc"),
    "chdir": (["hydra.job.chdir=true"], r"hydra.job.chdir=true would run the training inside its run directory"),
    # Issue 33: today's switches refuse what cannot work, before anything is written.
    "kv heads do not divide": (["model.num_kv_heads=3"], r"model.num_kv_heads must divide num_heads \(2\), got 3"),
    "rope with odd heads": (["model.embedding_dim=30", "model.positional=rope"], r"rope rotates pairs.*head has 15"),
    "softcap 0": (["model.logit_softcap=0"], r"model.logit_softcap must be a positive number, or null"),
    "softcap tiny": (
        ["model.logit_softcap=1e-30"],
        r"logit_softcap must be at least ln\(V - 1\) / 2 = 2.08 for .* V = 65",
    ),
    "gqa with biases": (["model.num_kv_heads=1", "model.bias=true"], r"set model.bias=false or model.num_kv_heads="),
    "smeared keys not a bool": (["model.smeared_keys=maybe"], r"^error: model.smeared_keys: Value 'maybe' is not a"),
    "muon adam_lr 0": (["optimizer=muon", "optimizer.adam_lr=0"], r"optimizer.adam_lr must be a positive finite"),
    "muon momentum 1": (["optimizer=muon", "optimizer.momentum=1"], r"optimizer.momentum must be in \[0, 1\) for Muon"),
    "muon ns_dtype": (["optimizer=muon", "optimizer.ns_dtype=float16"], r"optimizer.ns_dtype .*float32.*bfloat16"),
    # Issue 46: compute budgets and the size dial.
    "flops 0": (["trainer.flops=0"], r"trainer.flops must be a positive number of FLOPs, e.g. 1e13, or null, got 0"),
    "flops negative": (["trainer.flops=-1e12"], r"trainer.flops must be a positive number of FLOPs"),
    "flops below one step": (
        ["trainer.flops=1e6"],
        r"trainer.flops=1e\+06 is less than one step .*: raise trainer.flops",
    ),
    "scale 0": (["model.scale=0"], r"model.scale must be a positive integer, got 0: the size dial"),
    "scale negative": (["model.scale=-2"], r"model.scale must be a positive integer, got -2"),
    "scale with a size typed": (
        ["model.scale=3", "model.embedding_dim=64"],
        r"model.scale=3 sets model.num_layers, model.embedding_dim, model.num_heads itself, and "
        r"model.num_layers=2 model.embedding_dim=64 model.num_heads=2 typed too: keep one or the other",
    ),
    "flops with max_steps typed": (["trainer.flops=1e12"], r"trainer.flops=1e12 sets trainer.max_steps itself"),
    "a second window key": (["data.context_window=8"], r"'data.context_window': did you mean model.context_window\?"),
}


@pytest.mark.parametrize("case", TRAIN_CASES)
def test_train_refuses_bad_input_before_writing_anything(workspace, case, monkeypatch, capsys):
    overrides, pattern = TRAIN_CASES[case]
    args = tiny_training(workspace / "outputs", *(o.format(ws=workspace) for o in overrides))
    before = files_under(workspace)
    hide_gpus(monkeypatch)  # "gpu without gpu" holds on a GPU machine too
    assert_refused(run_in_process(monkeypatch, capsys, train_main, args), pattern)
    assert files_under(workspace) == before  # no run directory, no log, no checkpoint


def test_a_parallel_sweep_with_no_workers_is_refused_before_its_directory(workspace, monkeypatch, capsys):
    """Issue 25: joblib's ValueError came after the sweep directory existed."""
    args = ["-m", "hydra/launcher=parallel", "hydra.launcher.n_jobs=0", "seed=1,2"]
    args += tiny_training(workspace / "outputs")
    before = files_under(workspace)
    result = run_in_process(monkeypatch, capsys, train_main, args)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    # one line, not one per sweep point: a refusal every point shares is said once (issue 37, item 16)
    assert len(lines) == 1 and "hydra.launcher.n_jobs must be a non-zero integer, got 0" in lines[0]
    assert files_under(workspace) == before


DEFAULT_SIZES = ["model.embedding_dim=120", "model.num_layers=4", "model.num_heads=4", "model.context_window=64"]


@pytest.mark.parametrize("key", ["hydra.run.dir", "paths.log_dir"])
def test_a_disk_without_room_for_the_checkpoints_is_refused_before_anything_is_written(
    workspace, key, monkeypatch, capsys
):
    """Issue 25: a 3 MB tmpfs as the run dir passed the pre-check, then OSError [Errno 28] from Hydra."""
    log_dir = workspace / "outputs"
    place = [f"hydra.run.dir={log_dir / 'run'}"] if key == "hydra.run.dir" else []
    args = tiny_training(log_dir, *DEFAULT_SIZES, *place)
    free = 3 * 10**6  # a 3 MB disk
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(free, 0, free))
    before = files_under(workspace)
    result = run_in_process(monkeypatch, capsys, train_main, args)
    where = log_dir / "run" if key == "hydra.run.dir" else log_dir
    assert_refused(
        result,
        rf"^error: not enough free space for the run in {re.escape(str(where))}: it writes about 3\d\.\d MB "
        rf"\(best.ckpt and last.ckpt of 8\.\d MB each.*3\.0 MB are free there: free 2\d\.\d MB or more, "
        rf"or choose another {re.escape(key)}=",
    )
    assert files_under(workspace) == before


def test_the_error_line_stays_one_line_when_train_log_cannot_take_it(tmp_path, monkeypatch, capsys):
    """A full disk can refuse train.log's copy of the error line too: no '--- Logging error ---' traceback."""

    class FullDisk(io.StringIO):
        def write(self, text):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    handler = logging.FileHandler(tmp_path / "train.log", delay=True)
    handler.stream = FullDisk()
    monkeypatch.setattr(logging, "raiseExceptions", True)
    monkeypatch.setattr(logging.getLogger(), "handlers", [handler])
    with pytest.raises(SystemExit) as stopped:
        fail("the disk of run is full")
    assert stopped.value.code == 2
    assert capsys.readouterr().err == "error: the disk of run is full\n"


@pytest.mark.slow
def test_the_disk_estimate_holds_a_real_checkpoint(trained):
    run_dir, _ = trained
    size = (run_dir / "checkpoints" / "last.ckpt").stat().st_size
    estimate = preflight.checkpoint_bytes(compose_training(run_dir), 65)
    assert size <= estimate <= 1.05 * size  # 358,784 for 352,197 bytes; 8.51 MB for 8.45 at the defaults


@pytest.mark.slow
@pytest.mark.parametrize("where", ["events", "checkpoint"])
def test_a_disk_that_fills_during_the_run_ends_it_in_one_line_and_keeps_the_newest_checkpoint(
    tmp_path, where, monkeypatch
):
    """Issue 25: the disk fills at step 15, after the step-10 checkpoints (another program took the
    room the pre-check saw): one line, exit 2, no thread's traceback, last.ckpt of step 10 intact."""
    from tensorboard.summary.writer import record_writer

    monkeypatch.setattr(os, "fsync", os.fsync)  # DiskFullAt replaces one of these: given back after the test
    monkeypatch.setattr(record_writer.RecordWriter, "write", record_writer.RecordWriter.write)
    run_dir = tmp_path / "run"
    args = tiny_training(
        tmp_path,
        "trainer.max_steps=30",
        "trainer.val_check_interval=10",
        f"hydra.run.dir={run_dir}",
        "+callbacks.full._target_=tests.helpers.DiskFullAt",
        "+callbacks.full.step=15",
        f"+callbacks.full.where={where}",
    )
    result = run_main("train", *args)
    last = run_dir / "checkpoints" / "last.ckpt"
    kept = f"the newest checkpoint, {last}, is intact: resume with python -m src.train ckpt_path={last}"
    if where == "events":
        pattern = rf"^error: the disk of {re.escape(str(run_dir))} is full \(No space left on device\): the run needs"
    else:
        pattern = r"^error: cannot write the checkpoint .*\(No space left on device; it needs 0\.\d MB"
    assert_refused(result, pattern + rf".*{re.escape(kept)}")
    assert "Exception in thread" not in result.stderr
    assert torch.load(last, weights_only=False)["global_step"] == 10
    assert not list(last.parent.glob("*.partial-*"))
    assert (run_dir / "train.log").read_text().splitlines()[-1] == result.stderr.strip()


@pytest.mark.slow
def test_the_real_command_refuses_the_same_way(workspace):
    """The process, once: the refusals above are main()'s, in this process; here the command line's."""
    overrides, pattern = TRAIN_CASES["output not writable"]
    before = files_under(workspace)
    assert_refused(run_cli("train", *tiny_training(workspace / "outputs", *overrides)), pattern)
    assert files_under(workspace) == before


@pytest.mark.slow
def test_a_truncated_checkpoint_is_refused(trained, workspace):
    run_dir, _ = trained
    data = (run_dir / "checkpoints" / "last.ckpt").read_bytes()
    (workspace / "cut.ckpt").write_bytes(data[: len(data) // 2])
    for command in ("train", "generate", "evaluate"):
        args = [f"ckpt_path={workspace / 'cut.ckpt'}", f"paths.log_dir={workspace / 'outputs'}"]
        assert_refused(run_main(command, *args), r"truncated or corrupt")


RESUME_CASES = {
    "model.embedding_dim=64": r"was trained with model\.embedding_dim=32, but the config says 64",
    "optimizer=sgd": r"was trained with optimizer=adamw, whose state it holds, but the config says optimizer=sgd",
    "trainer.max_steps=40": r"has already trained 40 steps and trainer.max_steps=40: .*set trainer.max_steps above 40",
}


@pytest.mark.slow
@pytest.mark.parametrize("override", RESUME_CASES)
def test_a_resume_that_cannot_work_is_refused_and_writes_nothing_into_the_run(
    trained, tmp_path, override, monkeypatch, capsys
):
    run_dir, _ = trained
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    before = {p: p.read_bytes() for p in files_under(copy) if p.is_file()}
    result = run_in_process(monkeypatch, capsys, train_main, [f"ckpt_path={copy}", override])
    assert_refused(result, RESUME_CASES[override])
    assert {p: p.read_bytes() for p in files_under(copy) if p.is_file()} == before  # overrides.yaml too


GENERATE_CASES = {
    "unknown characters": (["prompt='Zounds€ and ☃'"], r"prompt has 2 character\(s\) not in the vocabulary: '€', '☃'"),
    "negative max_new_tokens": (["max_new_tokens=-1"], r"max_new_tokens must be a non-negative integer"),
    "negative temperature": (["temperature=-0.5"], r"temperature must be >= 0"),
    "top_k below 1": (["top_k=0"], r"top_k must be an integer >= 1"),
    "top_p above 1": (["top_p=1.5"], r"top_p must be in \(0, 1\]"),
    "top_p zero": (["top_p=0"], r"top_p must be in \(0, 1\]"),
    "unknown key": (["temprature=1"], r"unknown config key 'temprature'.*temperature"),
    "beyond memory": (
        ["max_new_tokens=1000000000", "num_samples=1000"],
        r"max_new_tokens=1000000000 x num_samples=1000 would hold about",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", GENERATE_CASES)
def test_generate_refuses_bad_arguments(trained, case):
    run_dir, _ = trained
    overrides, pattern = GENERATE_CASES[case]
    assert_refused(run_main("generate", f"ckpt_path={run_dir}", *overrides), pattern)


@pytest.mark.slow
def test_generate_without_any_checkpoint_says_how_to_get_one(tmp_path):
    result = run_main("generate", f"paths.log_dir={tmp_path}")
    assert_refused(result, r"no checkpoint under .*python -m src\.train")


def test_the_shared_corpus_is_the_real_one():
    assert shakespeare_file().stat().st_size == 1_115_394


@pytest.mark.slow
def test_resuming_on_another_text_is_refused_unless_asked_for(trained, tmp_path, monkeypatch, capsys):
    """Issue 25: a text with a subset of the run's characters, or the run's own text with more
    appended, resumed silently (only the vocabulary was compared). finetune=true asks for it."""
    run_dir, _ = trained
    text = shakespeare_file().read_text()
    subset, appended = tmp_path / "subset.txt", tmp_path / "appended.txt"
    subset.write_text(text[:40_000])
    appended.write_text(text + "\nROMEO:\nAnd one more line.\n")
    for other in (subset, appended):
        copy = tmp_path / f"run-{other.stem}"
        shutil.copytree(run_dir, copy)
        args = [f"ckpt_path={copy}", f"data.path={other}", "trainer.max_steps=41"]
        result = run_in_process(monkeypatch, capsys, train_main, args)
        assert_refused(
            result, rf"was trained on another text \(.*input\.txt, sha256 .*\) than data.path={other}.*finetune=true"
        )
    plan = preflight.plan(
        compose_training(tmp_path / "ft", f"ckpt_path={run_dir}", "trainer.max_steps=41", "finetune=true", data=subset)
    )
    assert plan.resume == run_dir / "checkpoints" / "last.ckpt" and Path(plan.corpus.source) == subset


@pytest.mark.slow
def test_the_other_commands_name_their_own_keys(trained, tmp_path):
    """Issue 25: evaluate named training's keys, plot_attention's prompt and out went unnamed, and
    a checkpoint edited to an impossible model was answered with advice to choose another width."""
    run_dir, _ = trained
    assert_refused(
        run_main("evaluate", f"ckpt_path={run_dir}", "val_tokens=10"), r"^error: val_tokens \(10\) must exceed"
    )
    missing = tmp_path / "missing.txt"
    assert_refused(
        run_main("evaluate", f"ckpt_path={run_dir}", f"data_path={missing}"), r"^error: data_path=.* does not"
    )
    plot = ("plot_attention", f"ckpt_path={run_dir}")
    assert_refused(run_main(*plot, "prompt='Zounds€'"), r"^error: prompt has 1 character\(s\) not in the vocabulary")
    assert_refused(run_main(*plot, "out=/proc/attention.png"), r"^error: cannot write out=/proc/attention.png")
    # Issue 48: out= a checkpoint (its own input, or any other) was replaced by the PNG; a text likewise.
    best = run_dir / "checkpoints" / "best.ckpt"
    text = tmp_path / "notes.txt"
    text.write_text("my notes")
    before = best.read_bytes()
    for out in (best, text):
        assert_refused(run_main(*plot, f"out={out}"), r"^error: out=.* is an existing file this command did not write")
    assert best.read_bytes() == before and text.read_text() == "my notes"
    figure = tmp_path / "attention.png"
    for _ in range(2):  # its own earlier figure it replaces
        assert run_main(*plot, f"out={figure}").returncode == 0 and figure.read_bytes()[:4] == b"\x89PNG"
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    checkpoint["hyper_parameters"]["model"]["num_heads"] = 3  # embedding_dim 32
    torch.save(checkpoint, tmp_path / "edited.ckpt")
    result = run_main("generate", f"ckpt_path={tmp_path / 'edited.ckpt'}")
    assert_refused(result, r"edited.ckpt holds a model config no model can be built from \(embedding_dim \(32\) must")


def test_a_sweep_point_choosing_a_schema_is_refused_up_front(workspace, monkeypatch, capsys):
    args = ["-m", *tiny_training(workspace / "outputs", "model=gpt,seed_schema")]
    before = files_under(workspace)
    result = run_in_process(monkeypatch, capsys, train_main, args)
    assert_refused(result, r"job 1 \(.*model=seed_schema.*\): unknown option 'seed_schema' for model")
    assert files_under(workspace) == before


@pytest.mark.slow
def test_resuming_a_run_whose_directory_has_spaces_and_non_ascii_reloads_its_overrides(trained, tmp_path):
    """Issue 25: quoted, the run's overrides were not reloaded (a false "config says 64"); unquoted,
    the error named an override (hydra.run.dir=...) the user never typed."""
    run_dir, _ = trained
    odd = tmp_path / "run with spaces ü 日本"
    shutil.copytree(run_dir, odd)
    for typed in (f"ckpt_path='{odd}'", f"ckpt_path={odd}"):
        argv = continue_run([typed, "trainer.max_steps=41"])
        assert argv[-2:] == [f"ckpt_path='{odd / 'checkpoints' / 'last.ckpt'}'", f"hydra.run.dir='{odd}'"]
        cfg = compose("train", argv)
        assert cfg.model.embedding_dim == 32 and cfg.trainer.max_steps == 41
        assert preflight.plan(cfg).resume == odd / "checkpoints" / "last.ckpt"


@pytest.mark.slow
def test_a_shared_checkpoint_cannot_choose_which_local_file_is_read(trained, tmp_path):
    """Issue 48: a checkpoint whose data.path named a private file (and no sha256) had explore copy ~2,000
    characters of it into the page and evaluate score it. Now only the text whose sha256 the checkpoint
    records, or one the user names, is read, and the command says which."""
    run_dir, _ = trained
    private = tmp_path / "private.txt"
    private.write_text("my secret diary. " * 2000)
    checkpoint = torch.load(run_dir / "checkpoints" / "best.ckpt", weights_only=False)
    own = dict(checkpoint["hyper_parameters"]["data"])
    for record, said in [({"path": str(private)}, "records no sha256"), ({"sha256": own["sha256"]}, "is not the text")]:
        checkpoint["hyper_parameters"]["data"] = {**own, "path": str(private), **record}
        if "sha256" not in record:
            del checkpoint["hyper_parameters"]["data"]["sha256"]
        torch.save(checkpoint, tmp_path / "shared.ckpt")
        shared = f"ckpt_path={tmp_path / 'shared.ckpt'}"
        page = tmp_path / "page.html"
        assert_refused(run_main("explore", shared, f"out={page}"), rf"^error: .*{said}.*text=<file>")
        assert_refused(run_main("evaluate", shared), rf"^error: .*{said}.*data_path=<file>")
        assert not page.exists()
    named = run_main("evaluate", shared, f"data_path={shakespeare_file()}")
    assert named.returncode == 0 and f"text: {shakespeare_file()}" in named.stderr, named.stderr[-2000:]
    own_text = run_main("explore", f"ckpt_path={run_dir}", f"out={tmp_path / 'own.html'}")
    said = f"validation split of {Path(own['path']).name}"  # the file's name: no machine's folders in the page
    assert own_text.returncode == 0 and said in own_text.stderr, own_text.stderr
    assert "secret diary" not in (tmp_path / "own.html").read_text()
