"""Shared by the tests: where the corpus is, and running the CLIs as a user does."""

from __future__ import annotations

import contextlib
import errno
import importlib
import inspect
import io
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from lightning.pytorch import Callback
from omegaconf import DictConfig
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from src.data.corpus import TINY_SHAKESPEARE_SHA256, sha256_of
from src.run.cli import compose

ROOT = Path(__file__).resolve().parent.parent
# Where the workplace keeps its shared copy of Tiny Shakespeare (set-up seeds data/ from it).
SHARED = Path(os.environ.get("SCRATCHGPT_SHARED", ROOT.parent / "shared"))


def shakespeare_file() -> Path:
    """The Tiny Shakespeare copy that set-up placed in the project's data cache."""
    for candidate in (
        ROOT / "data" / "tinyshakespeare" / "input.txt",
        SHARED / "data" / "tinyshakespeare" / "input.txt",
    ):
        if candidate.is_file() and sha256_of(candidate) == TINY_SHAKESPEARE_SHA256:
            return candidate
    raise FileNotFoundError("Tiny Shakespeare is not in data/tinyshakespeare/: run the tests through `make test`")


def run_cli(module: str, *overrides: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m src.<module> <overrides>` from the project root, as a user types it.

    generate and evaluate are pinned to the CPU unless a test names a device (tiny_training pins
    training), so the suite asserts the same numbers on a GPU machine or a Mac."""
    if module in ("generate", "evaluate") and not any(o.startswith("device=") for o in overrides):
        overrides = (*overrides, "device=cpu")
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    full_env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run(
        [sys.executable, "-m", f"src.{module}", *overrides],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )


COMMANDS = {"export": "src.export.__main__", "exercises": "src.exercises.__main__"}


@contextlib.contextmanager
def command_state() -> Iterator[None]:
    """Whatever a command's main() changes in this process, given back after it: Hydra's global state,
    the logging configuration Hydra installs (root handlers, a run's train.log), signal handlers, the
    environment, the working directory, torch's threads, sys.argv and the warning filters; and what the
    end of a process would drop: the run and sweep directories' locks (`.lock` files opened meanwhile),
    and the state a sweep's main process keeps for its one sweep (src/sweeps/summary.py's SWEEP)."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    named = logging.Logger.manager.loggerDict.values()
    loggers = [logging.getLogger(), *(v for v in named if isinstance(v, logging.Logger))]
    saved_loggers = [(lg, list(lg.handlers), lg.level, lg.disabled, lg.propagate) for lg in loggers]
    catchable = [s for s in signal.Signals if s not in (signal.SIGKILL, signal.SIGSTOP)]
    handlers = {s: signal.getsignal(s) for s in catchable}
    env, cwd, argv, threads = dict(os.environ), os.getcwd(), list(sys.argv), torch.get_num_threads()
    raise_exceptions, dtype = logging.raiseExceptions, torch.get_default_dtype()
    matmul = torch.get_float32_matmul_precision()
    locks = open_locks()
    forget_sweep()  # a test that ran a sweep's job directly (run_job) leaves its jobs there: not this command's
    try:
        with warnings.catch_warnings():
            yield
    finally:
        GlobalHydra.instance().clear()
        HydraConfig.instance().cfg = None
        for lg, hs, level, disabled, propagate in saved_loggers:
            for h in lg.handlers:
                if h not in hs:
                    h.close()
            lg.handlers[:] = hs
            lg.level, lg.disabled, lg.propagate = level, disabled, propagate
        for s, h in handlers.items():
            if h is not None and signal.getsignal(s) is not h:
                signal.signal(s, h)
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        sys.argv[:] = argv
        torch.set_num_threads(threads)
        torch.set_default_dtype(dtype)
        torch.set_float32_matmul_precision(matmul)
        logging.raiseExceptions = raise_exceptions
        release_process_state(locks)


def open_locks() -> set[int]:
    """This process's file descriptors open on a run or sweep directory's `.lock`."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{fd}").endswith("/.lock"):
                found.add(int(fd))
    return found


def release_process_state(locks_before: set[int]) -> None:
    """What the kernel and a fresh interpreter give the next command: its locks released, no sweep state."""
    for fd in open_locks() - locks_before:
        os.close(fd)
    forget_sweep()
    held = getattr(sys.modules.get("src.run.rundir"), "HELD", None)  # locks taken, not yet held by a run
    if isinstance(held, dict):
        held.clear()


def forget_sweep() -> None:
    """A fresh process's sweep state (src/sweeps/summary.py's SWEEP: one sweep per process, by design)."""
    sweep = getattr(sys.modules.get("src.sweeps.summary"), "SWEEP", None)
    if sweep is not None:
        sweep.__dict__.update(type(sweep)().__dict__)


def run_main(module: str, *overrides: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m src.<module> <overrides>` run in this process: its main() with sys.argv set, stdout and
    stderr captured (output_into: Hydra's console log included, whose handler takes sys.stdout/stderr
    when it is configured), SystemExit as the return code, every global it changed given back
    (command_state).

    Seconds faster than run_cli (no interpreter, no import of Lightning): for what a command does.
    run_cli stays for what the process does (signals, its exit, --help before the imports, DDP)."""
    if module in ("generate", "evaluate") and not any(o.startswith("device=") for o in overrides):
        overrides = (*overrides, "device=cpu")
    code: int | str | None = 0
    texts = io.StringIO(), io.StringIO()
    with command_state(), output_into(texts) as (out, err):
        os.environ.pop("HYDRA_FULL_ERROR", None)
        os.environ.update(env or {})
        os.chdir(ROOT)
        sys.argv[:] = [f"src.{module}", *overrides]
        main = importlib.import_module(COMMANDS.get(module, f"src.{module}")).main
        takes_argv = any(p.default is p.empty for p in inspect.signature(main).parameters.values())
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                returned = main(sys.argv[1:]) if takes_argv else main()  # src.exercises: sys.exit(main(argv))
                code = returned if takes_argv else 0
            except SystemExit as stopped:
                code = stopped.code
            if code is not None and not isinstance(code, int):
                print(code, file=sys.stderr)  # sys.exit("message"), as the interpreter prints it
                code = 1
    return subprocess.CompletedProcess([module, *overrides], code or 0, texts[0].getvalue(), texts[1].getvalue())


@contextlib.contextmanager
def output_into(texts: tuple[io.StringIO, io.StringIO]) -> Iterator[tuple[io.TextIOWrapper, io.TextIOWrapper]]:
    """File descriptors 1 and 2 into files while the block runs, with a text stream on each for sys.stdout
    and sys.stderr: what the command prints and what the processes it starts (the parallel launcher's
    workers) print on the descriptors they inherit, in the order it was written, in `texts` after."""
    saved = [os.dup(1), os.dup(2)]
    files = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]
    streams = [
        io.TextIOWrapper(open(fd, "wb", buffering=0, closefd=False), encoding="utf-8", write_through=True)
        for fd in (1, 2)
    ]
    try:
        for fd, file in zip((1, 2), files, strict=True):
            os.dup2(file.fileno(), fd)
        yield streams[0], streams[1]
    finally:
        for fd, old, file, stream, text in zip((1, 2), saved, files, streams, texts, strict=True):
            stream.flush()
            os.dup2(old, fd)
            os.close(old)
            file.seek(0)
            text.write(file.read().decode(errors="replace"))
            file.close()


def tiny_training(log_dir: Path, *extra: str) -> list[str]:
    """Overrides for a model and run small enough for a test (seconds, not minutes).

    Pinned to the CPU unless `extra` chooses the trainer or its accelerator, so the suite asserts
    the same numbers on a GPU machine (tests that need a GPU are marked `gpu`)."""
    chosen = any(e.startswith(("trainer=", "trainer.accelerator=")) for e in extra)
    return [
        *([] if chosen else ["trainer.accelerator=cpu"]),
        f"paths.log_dir={log_dir}",
        f"data.path={shakespeare_file()}",
        "model.context_window=16",
        "model.embedding_dim=32",
        "model.num_heads=2",
        "model.num_layers=2",
        "data.batch_size=8",
        "data.val_fraction=0.02",
        "trainer.max_steps=40",
        "optimizer.lr=1e-2",
        "optimizer.warmup_steps=5",
        "trainer.val_check_interval=20",
        "trainer.log_every_n_steps=1",
        "sample.max_new_tokens=40",
        "progress_bar=false",
        *extra,
    ]


def scalars(run_dir: Path, events_dir: str = "tensorboard") -> dict[str, list[tuple[int, float]]]:
    """Every scalar TensorBoard would show for the run (events_dir: its events, in run_dir): tag -> [(step, value)]."""
    events = EventAccumulator(str(run_dir / events_dir), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def compose_training(run_dir: Path, *overrides: str, data: Path | None = None) -> DictConfig:
    """The config `python -m src.train` would run for tiny_training, to call train(cfg) in-process."""
    log_dir = run_dir.parent
    args = tiny_training(log_dir, *overrides)
    if data is not None:
        args.append(f"data.path={data}")
    return compose("train", [*args, f"paths.output_dir={run_dir}"])


def train_in_process(run_dir: Path, *overrides: str, data: Path | None = None) -> float:
    """train(cfg) in this process: seconds faster than the CLI, for tests of training behaviour."""
    from src.train import train

    return train(compose_training(run_dir, *overrides, data=data))


class SignalAt(Callback):
    """Sends its own process `signal_name` `times` times as the validation at `step` starts:
    add it to a run with `+callbacks.signal._target_=tests.helpers.SignalAt +callbacks.signal.step=...`."""

    def __init__(self, step: int, signal_name: str, times: int = 1):
        self.step, self.signum, self.times = step, signal.Signals[signal_name], times

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        if trainer.global_step == self.step and batch_idx == 0:
            for _ in range(self.times):
                os.kill(os.getpid(), self.signum)


class SignalsAfterStep(Callback):
    """Sends its own process each of `signal_names` (e.g. "SIGTERM,SIGTERM,SIGTERM": a supervisor
    repeating itself) as optimizer step `step` ends, while training is in a step's callbacks:
    `+callbacks.signal._target_=tests.helpers.SignalsAfterStep +callbacks.signal.step=3 ...`."""

    def __init__(self, step: int, signal_names: str):
        self.step, self.signums = step, [signal.Signals[n] for n in signal_names.split(",")]

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            for signum in self.signums:
                os.kill(os.getpid(), signum)


class PauseAt(Callback):
    """Pauses each rank as optimizer step `step` ends, for a test to act on the run from outside at a known
    step (scancel, scontrol, kill -9) without racing it: writes `<folder>/rank<r>.pid`, then waits until a
    stop signal reached the run or `<folder>/go` exists (at most 5 minutes):
    `+callbacks.pause._target_=tests.helpers.PauseAt +callbacks.pause.step=3 +callbacks.pause.folder=...`."""

    def __init__(self, step: int, folder: str):
        self.step, self.folder = step, Path(folder)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        from src.training.callbacks import GracefulInterrupt

        if trainer.global_step != self.step:
            return
        (self.folder / f"rank{trainer.global_rank}.pid").write_text(str(os.getpid()))
        interrupt = next(c for c in trainer.callbacks if isinstance(c, GracefulInterrupt))
        deadline = time.monotonic() + 300
        while interrupt.received is None and not (self.folder / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.05)


class NaNOnRank(Callback):
    """Turns rank `rank`'s weights NaN as optimizer step `step` starts, so only its loss is NaN there
    (the others follow a step later, through the averaged gradients): add it to a DDP run with
    `+callbacks.nan._target_=tests.helpers.NaNOnRank +callbacks.nan.rank=1 +callbacks.nan.step=2`."""

    def __init__(self, rank: int, step: int):
        self.rank, self.step = rank, step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_rank == self.rank and trainer.global_step == self.step:
            with torch.no_grad():
                for parameter in pl_module.parameters():
                    parameter.fill_(float("nan"))


class SignalRankAt(Callback):
    """Sends rank `rank`'s own process `signal_name` as optimizer step `step` ends (the other ranks
    get nothing): `+callbacks.signal._target_=tests.helpers.SignalRankAt +callbacks.signal.rank=1 ...`."""

    def __init__(self, rank: int, step: int, signal_name: str):
        self.rank, self.step, self.signum = rank, step, signal.Signals[signal_name]

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_rank == self.rank and trainer.global_step == self.step:
            os.kill(os.getpid(), self.signum)


class SleepRankAt(Callback):
    """Rank `rank` sleeps `seconds` as optimizer step `step` ends, as a loaded machine delays it:
    `+callbacks.sleep._target_=tests.helpers.SleepRankAt +callbacks.sleep.rank=0 ...`."""

    def __init__(self, rank: int, step: int, seconds: float):
        self.rank, self.step, self.seconds = rank, step, seconds

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_rank == self.rank and trainer.global_step == self.step:
            time.sleep(self.seconds)


class DiskFullAt(Callback):
    """From optimizer step `step` on, the disk is full where `where` writes: "events" (TensorBoard's
    writer thread) or "checkpoint" (os.fsync of a checkpoint's partial file), each failing with
    ENOSPC as a full filesystem does: `+callbacks.full._target_=tests.helpers.DiskFullAt
    +callbacks.full.step=15 +callbacks.full.where=events`."""

    def __init__(self, step: int, where: str):
        self.step, self.where = step, where

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step != self.step:
            return

        def full(*args, **kwargs):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        if self.where == "events":
            from tensorboard.summary.writer import record_writer

            record_writer.RecordWriter.write = full
        else:
            os.fsync = full


def block_network() -> None:
    """Make any connection or name lookup beyond this machine raise, in this process.

    Connections to the loopback address and Unix sockets stay allowed (wandb's offline service,
    Lightning's own processes talk to each other over them); a lookup of any other host name, or a
    connection to any other address, is refused with an OSError naming it. Self-contained (its
    source is also run at the start of run_cli_offline's subprocesses)."""
    import socket

    local = ("127.0.0.1", "::1", "localhost", "0.0.0.0", "")
    connect, connect_ex, getaddrinfo = socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo

    def remote(sock: socket.socket, address: object) -> bool:
        return sock.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in local  # type: ignore[index]

    def guarded_connect(sock: socket.socket, address: object) -> None:
        if remote(sock, address):
            raise OSError(f"network access attempted in a test: connect to {address}")
        return connect(sock, address)

    def guarded_connect_ex(sock: socket.socket, address: object) -> int:
        if remote(sock, address):
            raise OSError(f"network access attempted in a test: connect to {address}")
        return connect_ex(sock, address)

    def guarded_getaddrinfo(host: object, *args: object, **kwargs: object) -> object:
        if host not in local and host is not None:
            raise OSError(f"network access attempted in a test: look up {host}")
        return getaddrinfo(host, *args, **kwargs)

    socket.socket.connect = guarded_connect  # type: ignore[method-assign]
    socket.socket.connect_ex = guarded_connect_ex  # type: ignore[method-assign]
    socket.getaddrinfo = guarded_getaddrinfo  # type: ignore[assignment]


def run_cli_offline(module: str, *overrides: str, timeout: float = 300, env: dict | None = None):
    """run_cli, with block_network() in force in the command's process and the Hub told to stay offline."""
    import inspect
    import textwrap

    code = (
        textwrap.dedent(inspect.getsource(block_network))
        + "block_network()\nimport runpy, sys\n"
        + f"sys.argv = ['src.{module}', *sys.argv[1:]]\n"
        + f"runpy.run_module('src.{module}', run_name='__main__', alter_sys=True)\n"
    )
    if module in ("generate", "evaluate") and not any(o.startswith("device=") for o in overrides):
        overrides = (*overrides, "device=cpu")
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", **(env or {})}
    full_env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run(
        [sys.executable, "-c", code, *overrides],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )


def run_main_offline(module: str, *overrides: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """run_main with block_network() in force while the command runs (undone after) and the Hub told
    to stay offline: run_cli_offline's checks, in this process."""
    saved = socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo
    try:
        block_network()
        return run_main(module, *overrides, env={"HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", **(env or {})})
    finally:
        socket.socket.connect, socket.socket.connect_ex = saved[:2]  # type: ignore[method-assign]
        socket.getaddrinfo = saved[2]  # type: ignore[assignment]


def assert_refused(result, pattern: str) -> None:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
    assert re.search(pattern, lines[0]), lines[0]
    assert "Traceback" not in result.stdout + result.stderr


def hide_gpus(monkeypatch) -> None:
    """This process sees no CUDA GPU and no MPS, whatever the machine has."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


def run_in_process(monkeypatch, capsys, main, args: list[str]) -> subprocess.CompletedProcess:
    """A command's main() as the CLI runs it, for inputs it refuses (seconds faster than a process)."""
    monkeypatch.setattr(sys, "argv", ["python -m src", *args])
    with pytest.raises(SystemExit) as stopped:
        main()
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(args, stopped.value.code, out, err)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_agent(node: int, nnodes: int, port: int, *command: str) -> subprocess.Popen:
    """One torchrun agent of a static rendezvous on localhost (PyTorch's documented command: --nnodes,
    --node-rank, --master-addr, --master-port, no --rdzv-id), one process, running `command` (`-m
    src.train ...`); its output and its worker's, merged, on stdout."""
    agent = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}", "--nproc-per-node=1"]
    agent += [f"--node-rank={node}", "--master-addr=127.0.0.1", f"--master-port={port}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.Popen(
        [*agent, *command], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
