"""hydra/launcher=parallel (hydra_plugins/scratchgpt_launcher.py): a sweep's jobs on worker processes,
a killed worker failing its own job only; SIGINT and SIGTERM reach every worker once."""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path
from typing import Any

from src.run.record import read_result, write_record
from src.sweeps.job import WORKER, SweepStopped, stop_job
from src.sweeps.resources import worker_count
from src.sweeps.summary import SWEEP, finish
from src.training import STOP_SIGNALS

log = logging.getLogger(__name__)


def start_worker(parent: int) -> None:
    """A worker, as it starts: its own process group (a terminal's Ctrl-C reaches the main process
    only, which passes it on once), and it ends when the main process is gone between two jobs. tqdm
    takes a thread lock, not its named semaphore, which a worker killed with `kill -9` would leak."""
    import threading

    from tqdm import tqdm

    os.setpgrp()
    for s in STOP_SIGNALS:
        signal.signal(s, stop_job)
    tqdm.set_lock(threading.RLock())

    def watch() -> None:
        while os.getppid() == parent or WORKER.in_job:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="watch-main-process", daemon=True).start()


class WorkerPool:
    """`size` loky executors of one worker each. joblib's one executor of `size` workers fails every
    job when one worker dies (`kill -9`, the OOM killer); here only that worker's job fails."""

    def __init__(self, size: int):
        self.executors: list[Any] = [None] * size
        self.workers: list[Any] = [None] * size  # each executor's worker process
        self.stopped: str | None = None

    def submit(self, slot: int, fn: Callable[..., Any], *args: Any) -> Future:
        from joblib.externals.loky import ProcessPoolExecutor
        from joblib.externals.loky.backend.context import get_context
        from joblib.externals.loky.process_executor import BrokenProcessPool

        from src.training.callbacks import PARENT_ENV

        if self.executors[slot] is None:  # the main process's pid, for GracefulInterrupt to watch
            self.executors[slot] = ProcessPoolExecutor(
                max_workers=1,
                context=get_context("loky"),
                initializer=start_worker,
                initargs=(os.getpid(),),
                env={PARENT_ENV: str(os.getpid())},
            )
        try:
            future = self.executors[slot].submit(fn, *args)
        except BrokenProcessPool:  # its worker died between two jobs
            self.replace(slot)
            return self.submit(slot, fn, *args)
        # loky keeps an executor's workers in _processes (its own reusable executor reads them there);
        # the worker is started by submit
        self.workers[slot] = next(iter(self.executors[slot]._processes.values()), self.workers[slot])
        return future

    def forward(self, signum: int, frame: Any) -> None:
        """The main process's handler while its workers train: each worker stops its job between steps."""
        self.stopped = self.stopped or signal.Signals(signum).name
        for worker in self.workers:
            if worker is not None and worker.exitcode is None:
                try:
                    os.kill(worker.pid, signum)
                except ProcessLookupError:
                    pass

    def replace(self, slot: int) -> str:
        """After the worker of `slot` died: how it ended; the next job of the slot starts a new one."""
        worker = self.workers[slot]
        code = None
        if worker is not None:
            worker.join(timeout=10)
            code = worker.exitcode
        self.executors[slot].shutdown(wait=False)
        self.executors[slot] = self.workers[slot] = None
        return f"killed by {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit status {code}"

    def shutdown(self) -> None:
        for executor in self.executors:
            if executor is not None:
                executor.shutdown(wait=True)


def launch_parallel(launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[Any]:
    """Hydra's joblib launcher's execute_job on a WorkerPool, `hydra.launcher.n_jobs` jobs at a time."""
    from hydra.core.singleton import Singleton
    from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, setup_globals
    from hydra_plugins.hydra_joblib_launcher._core import execute_job
    from joblib.externals.loky.process_executor import BrokenProcessPool

    setup_globals()
    configure_log(launcher.config.hydra.hydra_logging, launcher.config.hydra.verbose)
    sweep_dir = Path(str(launcher.config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    pool = WorkerPool(worker_count(int(launcher.joblib["n_jobs"]), len(job_overrides)))
    log.info(f"Launching {len(job_overrides)} jobs, {len(pool.executors)} at a time, sweep output dir : {sweep_dir}")
    waiting = deque((initial_job_idx + i, list(o)) for i, o in enumerate(job_overrides))
    for number, overrides in waiting:
        log.info(f"\t#{number} : {' '.join(filter_overrides(overrides))}")
    state = Singleton.get_state()
    running: dict[Future, tuple[int, int]] = {}  # future -> (job number, slot)
    returns: dict[int, JobReturn] = {}
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for s in STOP_SIGNALS:
        signal.signal(s, pool.forward)
    try:
        while running or (waiting and pool.stopped is None):
            busy = {slot for _, slot in running.values()}
            for slot in range(len(pool.executors)):
                if slot not in busy and waiting and pool.stopped is None:
                    number, overrides = waiting.popleft()
                    SWEEP.launched[number] = overrides
                    args = (number, overrides, launcher.hydra_context, launcher.config, launcher.task_function, state)
                    running[pool.submit(slot, execute_job, *args)] = (number, slot)
            done, _ = wait(list(running), timeout=1.0, return_when=FIRST_COMPLETED)
            for future in done:
                number, slot = running.pop(future)
                try:
                    returns[number] = future.result()
                except SweepStopped:  # its worker was stopped before this job began
                    del SWEEP.launched[number]
                    continue
                except BrokenProcessPool:  # its worker died (TerminatedWorkerError)
                    how = pool.replace(slot)
                    if pool.stopped is None:
                        worker_killed(sweep_dir / str(number), number, how)
                    returns[number] = JobReturn(overrides=SWEEP.launched[number], status=JobStatus.COMPLETED)
                ret = returns[number]
                if ret.status == JobStatus.COMPLETED and ret.return_value is None and pool.stopped is None:
                    SWEEP.returned_none.add(number)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        pool.shutdown()
    if pool.stopped is not None:
        finish(launcher.config, pool.stopped, initial_job_idx + len(job_overrides))
    return [returns[n] for n in sorted(returns)]


def worker_killed(job_dir: Path, number: int, how: str) -> None:
    """A job whose worker process died under it: failed, in one line; a rerun resumes it from its last.ckpt."""
    record = read_result(job_dir) or {"overrides": SWEEP.launched[number]}
    then = "a rerun resumes it from its last.ckpt" if (job_dir / "checkpoints" / "last.ckpt").is_file() else ""
    reason = f"its worker process was {how}" + (f": {then}" if then else "")
    if job_dir.is_dir():
        write_record(job_dir, {**record, "status": "failed", "reason": reason, "resumable": True})
    print(f"error: job {number} ({record.get('run_name') or ' '.join(record['overrides'])}): {reason}", file=sys.stderr)
