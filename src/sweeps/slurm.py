"""hydra/launcher=slurm's request checked against the cluster before anything is submitted: a job no
node of the partition can hold pends forever (more cores, GPUs or nodes than it has: squeue's
`PartitionConfig`) or is refused by sbatch in its own words ("Memory specification can not be
satisfied"); either ends here in one line naming the hydra.launcher setting to change."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

KEY = "hydra.launcher"


def fail(message: str) -> NoReturn:
    """One line and exit 2, from inside Hydra's launcher (outside the command's one-line errors)."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


@dataclass(frozen=True)
class Node:
    cpus: int
    mem_mb: int
    gpus: int


def partition_nodes(partition: str | None) -> tuple[str, list[Node]]:
    """The partition's name (null: the cluster's default) and its nodes, as `sinfo` lists them."""
    try:
        listed = subprocess.run(["sinfo", "-h", "-N", "-o", "%P|%c|%m|%G"], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        fail(
            "hydra/launcher=slurm submits to SLURM, but sinfo is not on PATH: run the sweep where SLURM's commands are "
            "(a login node), or start this project's one-node cluster: make slurm-up"
        )
    except subprocess.TimeoutExpired:
        fail("hydra/launcher=slurm: sinfo did not answer in 60 s: is slurmctld up? (sinfo)")
    if listed.returncode != 0:
        fail(f"hydra/launcher=slurm: sinfo failed: {' '.join(listed.stderr.split())} (is SLURM_CONF right?)")
    nodes: dict[str, list[Node]] = {}
    default = None
    for line in listed.stdout.splitlines():
        name, cpus, mem, gres = line.split("|")
        if name.endswith("*"):
            name = default = name[:-1]
        gpus = sum(int(n) for n in re.findall(r"gpu(?::[^:(,]+)?:(\d+)", gres))
        nodes.setdefault(name, []).append(Node(int(cpus), int(mem.rstrip("+")), gpus))
    chosen = partition or default
    if chosen not in nodes:
        known = ", ".join(sorted(nodes)) or "none"
        fail(f"{KEY}.partition={partition}: SLURM has no such partition (sinfo lists: {known}): set one of them")
    return chosen, nodes[chosen]


def check_request(params: dict[str, Any]) -> None:
    """Each thing a job asks of a node against the largest the partition has; one line naming the first
    that no node can give."""
    partition, nodes = partition_nodes(params.get("partition"))
    where = f"partition {partition}"
    tasks, cpus = int(params.get("tasks_per_node") or 1), int(params.get("cpus_per_task") or 1)
    most = max(n.cpus for n in nodes)
    if tasks * cpus > most:
        fail(
            f"{KEY}.cpus_per_task={cpus}: {tasks} tasks per node (trainer.devices) x {cpus} cores = {tasks * cpus}, "
            f"but the largest node of {where} has {most} cores: lower {KEY}.cpus_per_task or trainer.devices"
        )
    most_mb = max(n.mem_mb for n in nodes)
    if params.get("mem_gb") is not None and int(params["mem_gb"]) * 1024 > most_mb:
        fail(
            f"{KEY}.mem_gb={params['mem_gb']}: the largest node of {where} has {most_mb // 1024} GB: "
            f"set {KEY}.mem_gb to at most {most_mb // 1024}"
        )
    gpus = int(params.get("gpus_per_node") or 0)
    if gpus > max(n.gpus for n in nodes):
        fail(
            f"{KEY}.gpus_per_node={gpus}: the nodes of {where} have at most {max(n.gpus for n in nodes)} GPUs: "
            f"choose a GPU partition ({KEY}.partition=...), fewer trainer.devices, or a CPU trainer (trainer=ddp_cpu)"
        )
    if int(params.get("nodes") or 1) > len(nodes):
        fail(
            f"{KEY}.nodes={params['nodes']}: {where} has {len(nodes)} nodes: lower trainer.num_nodes "
            f"(hydra/launcher=slurm asks for trainer.num_nodes nodes)"
        )


@contextmanager
def sbatch_refusals() -> Iterator[None]:
    """sbatch refusing a job check_request let through (a limit of the account or QOS): one line, in sbatch's words."""
    from submitit.core.utils import FailedJobError

    try:
        yield
    except FailedJobError as err:
        said = "; ".join(line for line in str(err).splitlines() if line.startswith("sbatch: error:")) or str(err)
        fail(
            f"hydra/launcher=slurm: sbatch refused the job ({' '.join(said.split())}): "
            f"change the {KEY} setting it is about"
        )
