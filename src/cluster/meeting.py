"""The ranks torchrun starts meet through torchrun's own store before they train.

torchrun's agents run a TCPStore at MASTER_ADDR:MASTER_PORT for their workers (its static
rendezvous, `--master-addr/--master-port`, and its c10d one alike). Through it the ranks:
- agree on one run directory without an id typed on every node: rank 0 names it (a timestamped
  folder, as a one-process run's), the others take that name;
- hear a rank that refused the run: its `error:` line is posted there, and every rank waiting for it
  ends with that line at once (a rank refused while its peer waited in the process group's
  rendezvous, deaf to SIGTERM, until torchrun killed it);
- compare what each was started with (torchrun's --nnodes, the composed config) before the process
  group forms, so agents that disagree end in one line naming the difference.

Every wait polls the store (a short sleep between looks), so a stop signal acts at once, and ends
within WAIT_SECONDS when a peer never comes (its process killed before it posted anything).
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from src.rules import ConfigError

if TYPE_CHECKING:
    from omegaconf import DictConfig
    from torch.distributed import Store

WAIT_SECONDS = 600.0  # for a peer that never posts anything (a slow node plans its text meanwhile)
POLL_SECONDS = 0.05
FAILED = "failed"  # the first `error:` line a rank posted

_store: Store | None = None
_folder: str | None = None


class RanksDisagree(ConfigError):
    """The ranks of one torchrun run were started differently, or one of them refused the run."""


def torchrun_store_address() -> tuple[str, int] | None:
    """Where torchrun's agent store for this worker group listens, or None outside torchrun (one
    process, or a rendezvous whose workers host their own store)."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or int(os.environ.get("WORLD_SIZE", "1")) < 2:
        return None
    return os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])


# SLURM's step ids that are not an srun step: the batch script, the external container, salloc's shell.
NOT_SRUN_STEPS = {"4294967294", "4294967295", "4294967293"}


def started_by_srun() -> bool:
    """Whether srun started this process as a task of a job step (not an sbatch script or salloc)."""
    step = os.environ.get("SLURM_STEP_ID", os.environ.get("SLURM_STEPID"))
    return step is not None and step not in NOT_SRUN_STEPS


def check_launched_run(launched: tuple[str, str] | None, run_dir_typed: bool) -> None:
    """Refuse ranks that could never meet: SLURM tasks that srun did not start (Lightning would wait
    forever), torchrun without --rdzv-id and without a store to agree on a run directory through.
    launched: src/run/rundir.py's launched_run()."""
    tasks = os.environ.get("SLURM_NTASKS", "1")
    interactive = os.environ.get("SLURM_JOB_NAME") in ("bash", "interactive")  # Lightning's own opt-out
    if tasks.isdigit() and int(tasks) > 1 and not interactive and not started_by_srun():
        raise ValueError(
            f"SLURM promises {tasks} tasks (SLURM_NTASKS={tasks}), but srun did not start this process, so the "
            f"other ranks would never come and the run would wait for them forever: start it with "
            f"`srun python -m src.train ...` inside the job (or --ntasks=1 for one process)"
        )
    if launched is not None and launched[1] == "none" and not run_dir_typed and torchrun_store_address() is None:
        raise ValueError(
            "torchrun started this run without --rdzv-id and without a store of its own for its workers, so its "
            "ranks cannot agree on one run directory: "
            "give every torchrun the same --rdzv-id=<name> (the run goes to outputs/torchrun/<name>), "
            "or the same hydra.run.dir=<folder>"
        )


def store(connect_seconds: float = 30) -> Store:
    """This run's part of torchrun's store (keys apart per restart of the worker group)."""
    global _store
    if _store is None:
        from torch.distributed import PrefixStore, TCPStore

        address = torchrun_store_address()
        assert address is not None
        tcp = TCPStore(*address, is_master=False, timeout=timedelta(seconds=connect_seconds), wait_for_workers=False)
        run = f"{os.environ.get('TORCHELASTIC_RUN_ID', 'none')}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        _store = PrefixStore(f"scratchgpt/{run}", tcp)  # keys: scratchgpt/<run id>/<restart>/<key>
    return _store


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def world() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def wait_for(key: str, what: str) -> str:
    """The value a peer posts under key; a peer's refusal, or WAIT_SECONDS of silence, ends this
    rank in one line. Polled, so that a stop signal's handler runs between two looks."""
    shared = store()
    deadline = time.monotonic() + WAIT_SECONDS
    while not shared.check([key]):
        if shared.check([FAILED]):
            raise RanksDisagree(shared.get(FAILED).decode())
        if time.monotonic() > deadline:
            raise RanksDisagree(
                f"rank {rank()} of {world()} waited {WAIT_SECONDS:.0f} s for {what}, which never came (its process "
                f"is gone or stuck): check the other torchrun agents' output, then start them all again"
            )
        time.sleep(POLL_SECONDS)
    return shared.get(key).decode()


def agreed_folder(proposed: str) -> str:
    """The run's folder under paths.log_dir, the same on every rank: rank 0's `proposed` (its
    timestamped folder), read by the others from torchrun's store."""
    global _folder
    if _folder is None:
        try:
            if rank() == 0:
                _folder = store().compare_set("run_folder", "", proposed).decode()  # the first answer stays
            else:
                _folder = wait_for("run_folder", "rank 0 to name the run directory")
        except ConfigError as err:
            end(str(err))  # inside Hydra's resolver: an exception would become Hydra's traceback
    return _folder


def post_failure(message: str) -> None:
    """Tell the other ranks why this one ends (its `error:` line's message), if torchrun started it;
    the first message posted stays. Never raises: the rank is ending anyway."""
    if torchrun_store_address() is None:
        return
    try:
        store(connect_seconds=5).compare_set(FAILED, "", f"rank {rank()} of {world()} ended: {message}")
    except Exception:  # the store is gone (its agent ended): nobody is left to tell
        pass


def end(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    post_failure(message)
    sys.exit(2)


def flat(node: Any, prefix: str = "") -> dict[str, Any]:
    """A composed config as {dotted key: value}."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(flat(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: node}


def started_as() -> dict[str, Any]:
    """What torchrun's agent told this rank: its --nnodes, --nproc-per-node and node rank."""
    return {k: os.environ.get(k) for k in ("GROUP_WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")}


def differences(views: list[dict[str, Any]]) -> list[str]:
    """Where the ranks' views differ from rank 0's, as the fixes name them."""
    said = []
    nnodes = {int(v["agent"]["GROUP_RANK"] or 0): v["agent"]["GROUP_WORLD_SIZE"] for v in views}
    if len(set(nnodes.values())) > 1:
        each = ", ".join(f"--nnodes={n} on node {node}" for node, n in sorted(nnodes.items()))
        said.append(f"the torchrun agents disagree ({each}): start every agent with the same --nnodes")
    ours = views[0]["config"]
    for r, view in enumerate(views[1:], start=1):
        keys = sorted(k for k in ours.keys() | view["config"].keys() if ours.get(k) != view["config"].get(k))
        if keys:
            shown = ", ".join(f"{k}={view['config'].get(k)} (rank 0: {ours.get(k)})" for k in keys[:4])
            more = f" and {len(keys) - 4} more" if len(keys) > 4 else ""
            said.append(f"rank {r} was started with other settings: {shown}{more}: give every torchrun one command")
    return said


def meet(cfg: DictConfig) -> None:
    """Before the process group forms: every rank posts what it was started with, reads everyone's,
    and all end alike, in one line, when they differ or a rank refused the run."""
    from omegaconf import OmegaConf

    if torchrun_store_address() is None:
        return
    mine = {"agent": started_as(), "config": flat(OmegaConf.to_container(cfg, resolve=True))}
    store().set(f"view/{rank()}", json.dumps(mine, default=str))
    views = [json.loads(wait_for(f"view/{r}", f"rank {r} to start")) for r in range(world())]
    said = differences(views)
    if said:
        raise RanksDisagree("; ".join(said))
