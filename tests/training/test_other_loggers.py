"""logger=csv, mlflow, wandb and many: one real short run, the network blocked in its process, and
what each tracker's own reader reads back: the CSV file, MLflow's client over the SQLite store,
the records of W&B's offline run file. Every one holds the same loss curve as TensorBoard, the
run's hyperparameters, the text samples and the attention images."""

from __future__ import annotations

import csv
import json
import struct
from pathlib import Path

import pytest

from tests.helpers import run_cli_offline, run_main_offline, scalars, tiny_training

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    log_dir = tmp_path_factory.mktemp("loggers")
    run_dir = log_dir / "run"
    # A process: wandb closes its run (the "exit" record) in the exit handlers that the command runs as it ends.
    result = run_cli_offline(
        "train", *tiny_training(log_dir, f"hydra.run.dir={run_dir}", "logger=many", "explorer=false")
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


def val_curve(run_dir: Path) -> list[tuple[int, float]]:
    """TensorBoard's loss/val: what the other loggers must hold too."""
    curve = scalars(run_dir)["loss/val"]
    assert [step for step, _ in curve] == [0, 20, 40]
    return curve


def close(a: list[tuple[int, float]], b: list[tuple[int, float]]) -> bool:
    steps_match = [s for s, _ in a] == [s for s, _ in b]
    return steps_match and all(abs(x - y) < 1e-6 for (_, x), (_, y) in zip(a, b, strict=True))


def test_csv_holds_the_curve_the_hyperparameters_samples_and_maps(run: Path):
    folder = run / "csv"
    with open(folder / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    curve = [(int(r["step"]), float(r["loss/val"])) for r in rows if r.get("loss/val")]
    assert close(curve, val_curve(run))
    assert any(r.get("loss/train") for r in rows) and "epoch" not in rows[0]
    hparams = (folder / "hparams.yaml").read_text()
    assert "model/num_heads: 2" in hparams and "varied:" in hparams
    samples = sorted(p.name for p in (folder / "samples").iterdir())
    assert samples == ["step_000000.txt", "step_000020.txt", "step_000040.txt"]  # from step 0, as the curve
    assert (folder / "maps" / "attention_layer_1_step_000040.png").stat().st_size > 1000


def test_mlflow_client_lists_the_runs_metrics_params_and_artifacts(run: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{run / 'mlflow' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("scratchgpt")
    (found,) = client.search_runs([experiment.experiment_id])
    assert found.info.run_name == run.name
    history = client.get_metric_history(found.info.run_id, "loss/val")
    assert close(sorted((m.step, m.value) for m in history), val_curve(run))
    assert {"loss/train", "loss/val_best", "val/bpc"} <= set(found.data.metrics)
    assert found.data.params["model/num_heads"] == "2" and found.data.params["optimizer/lr"] == "0.01"
    assert "model.num_heads" in found.data.tags["varied"].split(",")
    samples = [a.path for a in client.list_artifacts(found.info.run_id, "samples")]
    assert samples == ["samples/step_000000.txt", "samples/step_000020.txt", "samples/step_000040.txt"]
    assert client.list_artifacts(found.info.run_id, "images")  # the attention maps, via log_image
    assert (run / "mlflow" / "artifacts").is_dir()  # under the run, not the working directory


def wandb_records(path: Path):
    """The records of a W&B run file, decoded with wandb's own protobuf schema.

    The file is a LevelDB-style log after a 7-byte header (":W&B", a magic number, a version): 32 KiB
    blocks of chunks, each a CRC-32C, a little-endian length and a type (1 whole, 2 first, 3 middle,
    4 last)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, pos, parts = 32768, 7, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        length, kind = struct.unpack("<HB", data[pos + 4 : pos + 7])
        parts += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            parts = b""
            yield record


def test_wandb_offline_run_holds_the_history_config_and_media(run: Path):
    (run_file,) = (run / "wandb").glob("offline-run-*/run-*.wandb")
    history, config, kinds = [], {}, []
    for record in wandb_records(run_file):
        kind = record.WhichOneof("record_type")
        kinds.append(kind)
        if kind == "history":
            history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item})
        if kind == "config":
            config |= {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.config.update}
    curve = [(h["trainer/global_step"], h["loss/val"]) for h in history if "loss/val" in h]
    assert close(curve, val_curve(run))
    assert kinds[-1] == "exit"  # the run was closed, not cut off
    assert config["model/num_heads"] == 2 and "model.num_heads" in config["varied"]
    keys = {k for h in history for k in h}
    assert {"samples/_type", "maps/attention_layer_0/_type"} <= keys  # the samples table, the images
    assert list(run_file.parent.glob("files/media/images/maps/*.png"))


def refused(result, *words: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and all(w in lines[0] for w in words), result.stderr


def test_a_loggers_unknown_key_is_refused_before_anything_is_written(tmp_path: Path):
    run_dir = tmp_path / "run"
    base = tiny_training(tmp_path, f"hydra.run.dir={run_dir}")
    refused(run_main_offline("train", *base, "logger=mlflow", "+logger.tracking_uri=http://x"), "tracking_uri")
    refused(run_main_offline("train", *base, "logger=many", "+logger.csv.flush=1"), "logger.csv.flush")
    refused(run_main_offline("train", *base, "logger=wandb", "+logger.offline=false"), "logger.offline=false")
    assert not run_dir.exists()


@pytest.mark.parametrize("launcher", [[], ["hydra/launcher=parallel", "hydra.launcher.n_jobs=2"]])
def test_a_sweep_logs_every_job_into_one_mlflow_store(tmp_path: Path, launcher: list[str]):
    """logger=mlflow in a sweep: one store in the sweep directory, a run per job named by its swept value.
    Issue 48: two parallel jobs each created the fresh store and raced in MLflow's schema migration."""
    from mlflow.tracking import MlflowClient

    sweep = tmp_path / "sweep"
    args = ["-m", *tiny_training(tmp_path, f"hydra.sweep.dir={sweep}", "logger=mlflow", "seed=1,2", *launcher)]
    args += ["trainer.max_steps=4", "trainer.val_check_interval=2"]
    result = run_main_offline("train", *args)
    assert result.returncode == 0, result.stderr[-3000:]
    client = MlflowClient(tracking_uri=f"sqlite:///{sweep / 'mlflow' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("scratchgpt").experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["seed=1", "seed=2"]
    assert all([m.step for m in client.get_metric_history(r.info.run_id, "loss/val")] == [0, 2, 4] for r in runs)
    assert not list(sweep.glob("*/mlflow"))  # no store per job
