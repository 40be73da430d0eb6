"""The run's last line names the folder TensorBoard must open (issue 36, item 11)."""

from __future__ import annotations

import socket

import pytest

from tests.helpers import run_main, tiny_training


@pytest.mark.slow
def test_a_run_put_outside_the_log_dir_is_watched_where_it_is(tmp_path):
    log_dir, elsewhere = tmp_path / "outputs", tmp_path / "elsewhere" / "run"
    overrides = tiny_training(log_dir, f"hydra.run.dir={elsewhere}", "trainer.max_steps=4", "sample.max_new_tokens=0")
    result = run_main("train", *overrides, "trainer.val_check_interval=4", "explorer=false")
    assert result.returncode == 0, result.stderr[-2000:]
    watch = [line for line in result.stdout.splitlines() if line.startswith("watch it: ")]
    assert len(watch) == 1 and watch[0].endswith(f" -m src.watch {elsewhere}")  # not {log_dir}
    assert list((elsewhere / "tensorboard").glob("events.out.tfevents.*"))


def test_watch_refuses_a_missing_folder_and_a_taken_port_in_one_line(tmp_path, capsys):
    from src.watch import main

    with pytest.raises(SystemExit) as stopped:
        main([str(tmp_path / "nothere")])
    assert stopped.value.code == 2
    assert capsys.readouterr().err == (
        f"error: {tmp_path / 'nothere'} is not a folder: name the runs' folder, e.g. python -m src.watch outputs\n"
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SystemExit) as stopped:
            main([str(tmp_path), "--host", "127.0.0.1", "--port", str(port)])
    assert stopped.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert line.startswith(f"error: --port {port}: ") and line.endswith("choose another, e.g. --port 0")
