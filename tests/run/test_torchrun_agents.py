"""torchrun's documented static rendezvous, two "nodes" on this machine (two agents, gloo, the CPU).

Issue 37 item 9: `torchrun --nnodes=2 --node-rank=R --master-addr=... --master-port=... -m src.train
...` (no --rdzv-id) was refused, "started without --rdzv-id". Item 8: agents that disagree (--nnodes=2
on one, --nnodes=3 on the other) left the rank not refused waiting in the process group's
rendezvous, deaf to SIGTERM, until torchrun killed it 30 s later. The ranks now meet through
torchrun's own store (src/cluster/meeting.py).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from src.cluster import meeting
from tests.helpers import free_port, tiny_training, torchrun_agent

TINY = ["model.num_layers=1", "trainer.max_steps=6", "trainer.val_check_interval=6", "sample.max_new_tokens=0"]
TINY += ["callbacks.sample_text=null", "callbacks.attention_maps=null", "explorer=false"]


def two_nodes(log_dir: Path, *extra: str) -> list[str]:
    return ["-m", "src.train", *tiny_training(log_dir, "trainer=ddp_cpu", "trainer.devices=1", *TINY, *extra)]


def errors(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]


@pytest.mark.slow
def test_the_documented_static_rendezvous_trains_into_one_run_directory_named_through_torchruns_store(tmp_path):
    port = free_port()
    agents = [torchrun_agent(node, 2, port, *two_nodes(tmp_path, "trainer.num_nodes=2")) for node in (0, 1)]
    outputs = [agent.communicate(timeout=600)[0] for agent in agents]
    assert [agent.returncode for agent in agents] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    (result,) = tmp_path.rglob("result.json")  # one run, in rank 0's <date>/<time> folder
    run_dir = result.parent
    assert run_dir.parent.parent == tmp_path and run_dir.parent.name[:2] == "20", run_dir
    assert list(tmp_path.rglob(".hydra")) == [run_dir / ".hydra"]  # rank 1 wrote no run of its own
    assert json.loads(result.read_text())["steps"] == 6
    assert (run_dir / ".hydra" / "config.yaml").is_file() and (run_dir / "train.log").is_file()
    assert (run_dir / "train_rank_1.log").is_file()  # rank 1 found rank 0's folder and logs there
    assert f"run dir {run_dir}" in outputs[0]


DISAGREE = {
    "--nnodes": (
        (2, ["trainer.num_nodes=2"]),
        (3, ["trainer.num_nodes=3"]),
        r"the torchrun agents disagree \(--nnodes=2 on node 0, --nnodes=3 on node 1\): start every agent with the "
        r"same --nnodes; rank 1 was started with other settings: trainer.num_nodes=3 \(rank 0: 2\)",
    ),
    "a refused rank": (
        (2, ["trainer.num_nodes=2"]),
        (2, ["trainer.num_nodes=2", "data.batch_size=0"]),
        r"data.batch_size",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", DISAGREE)
def test_torchrun_agents_that_disagree_end_every_rank_in_one_line_naming_the_cause(tmp_path, case):
    """Both agents end, promptly (no rank waits for a peer that will never come), each worker with one
    line; before, rank 0 waited in the process group's rendezvous until killed."""
    (nnodes_0, extra_0), (nnodes_1, extra_1), cause = DISAGREE[case]
    port = free_port()
    agents = [
        torchrun_agent(0, nnodes_0, port, *two_nodes(tmp_path, *extra_0)),
        torchrun_agent(1, nnodes_1, port, *two_nodes(tmp_path, *extra_1)),
    ]
    outputs = [agent.communicate(timeout=600)[0] for agent in agents]
    for agent, output in zip(agents, outputs, strict=True):
        assert agent.returncode != 0, output[-3000:]
        (line,) = errors(output)
        assert re.search(cause, line), line
    assert not list(tmp_path.rglob("*.ckpt"))


@pytest.mark.slow
def test_a_rank_waiting_for_its_peer_stops_at_once_on_the_agents_sigterm(tmp_path):
    """Node 1's worker never comes to the meeting (a process that only sleeps): rank 0 waits for it in
    torchrun's store, polling, so the SIGTERM its agent forwards ends it with one line at once, before
    torchrun's 30 s escalation to SIGKILL ("Unable to shutdown process ... via 15")."""
    port = free_port()
    rank_0 = torchrun_agent(0, 2, port, *two_nodes(tmp_path, "trainer.num_nodes=2"))
    silent = torchrun_agent(1, 2, port, "--no-python", sys.executable, "-c", "import time; time.sleep(300)")
    try:
        deadline = time.monotonic() + 300
        while not list(tmp_path.glob("*/*/.hydra/config.yaml")):  # rank 0 is in its run, at the meeting
            assert time.monotonic() < deadline and rank_0.poll() is None, rank_0.stdout.read()[-3000:]
            time.sleep(0.2)
        time.sleep(2)
        rank_0.send_signal(signal.SIGTERM)
        started = time.monotonic()
        output = rank_0.communicate(timeout=120)[0]
        took = time.monotonic() - started
    finally:
        silent.terminate()  # its agent ends its worker too (kill -9 of the agent would orphan it)
        try:
            silent.wait(timeout=60)
        except subprocess.TimeoutExpired:
            silent.kill()
            silent.wait()
    assert took < 20, f"{took:.1f} s\n{output[-3000:]}"
    assert "Unable to shutdown process" not in output, output[-3000:]
    (line,) = errors(output)
    assert line.startswith("error: SIGTERM outside training"), line


def test_the_meeting_names_each_difference_between_the_ranks():
    def view(node: int, nnodes: int, **config) -> dict:
        agent = {"GROUP_RANK": str(node), "GROUP_WORLD_SIZE": str(nnodes), "LOCAL_WORLD_SIZE": "1"}
        return {"agent": agent, "config": {"seed": 1, **config}}

    assert meeting.differences([view(0, 2), view(1, 2)]) == []
    said = meeting.differences([view(0, 2, lr=0.1), view(1, 3, lr=0.2)])
    assert said == [
        "the torchrun agents disagree (--nnodes=2 on node 0, --nnodes=3 on node 1): start every agent with the "
        "same --nnodes",
        "rank 1 was started with other settings: lr=0.2 (rank 0: 0.1): give every torchrun one command",
    ]


def test_a_rank_waiting_in_torchruns_store_ends_in_one_line_when_its_peer_refuses_or_never_comes(monkeypatch):
    """torchrun's agent store stood up here (a TCPStore server), rank 0 waiting for rank 1."""
    from datetime import timedelta

    from torch.distributed import TCPStore

    port = free_port()
    agent_store = TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=10))
    env = {"TORCHELASTIC_USE_AGENT_STORE": "True", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    for key, value in {**env, "WORLD_SIZE": "2", "RANK": "0", "TORCHELASTIC_RUN_ID": "none"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(meeting, "_store", None)
    monkeypatch.setattr(meeting, "WAIT_SECONDS", 0.5)
    with pytest.raises(meeting.RanksDisagree, match=r"^rank 0 of 2 waited 0 s for rank 1 to start, which never came"):
        meeting.wait_for("view/1", "rank 1 to start")
    monkeypatch.setenv("RANK", "1")
    meeting.post_failure("data.batch_size must be a positive integer")  # what fail() posts as rank 1 ends
    monkeypatch.setenv("RANK", "0")
    started = time.monotonic()
    with pytest.raises(meeting.RanksDisagree, match=r"^rank 1 of 2 ended: data.batch_size must be a positive integer$"):
        meeting.wait_for("view/1", "rank 1 to start")
    assert time.monotonic() - started < 0.4  # at once, not after the wait
    assert agent_store.check(["scratchgpt/none/0/failed"])
