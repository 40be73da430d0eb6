"""In-process: how sweep jobs share the machine, their sweep defaults, and what the summary finds."""

import math
import re

import pytest
import torch
from hydra.core.hydra_config import HydraConfig

from src import sweep_analysis, sweeps
from src.plots import save_png, sweep_figure


def test_concurrent_jobs_divide_the_cores_and_take_a_gpu_each():
    assert sweeps.plan_resources(4, cores=16, gpus=0, accelerator="auto", devices=1) == (4, False)
    assert sweeps.plan_resources(3, cores=2, gpus=0, accelerator="cpu", devices=1) == (1, False)  # never 0 threads
    assert sweeps.plan_resources(4, cores=16, gpus=2, accelerator="gpu", devices=1) == (4, True)
    assert sweeps.plan_resources(3, 12, 3, "auto", 1) == (4, True)
    # a CPU trainer, a DDP job and a sequential sweep keep their devices
    assert not sweeps.plan_resources(4, 16, 2, "cpu", 1)[1]
    assert not sweeps.plan_resources(4, 16, 2, "gpu", 4)[1]
    assert not sweeps.plan_resources(1, 16, 2, "gpu", 1)[1]


def test_a_parallel_job_sets_its_share_of_threads(sweep_job, monkeypatch):
    monkeypatch.setattr(sweeps, "cpu_cores", lambda: 8)
    monkeypatch.setattr(sweeps, "gpu_count", lambda: 0)
    cfg = sweep_job("hydra/launcher=parallel", "hydra.launcher.n_jobs=4", num=5)
    plan = sweeps.configure_job_resources(cfg)
    assert plan.threads == 2 and torch.get_num_threads() == 2
    assert cfg.trainer.devices == 1  # no GPU here: devices untouched

    monkeypatch.setattr(sweeps, "gpu_count", lambda: 2)
    cfg = sweep_job("hydra/launcher=parallel", "hydra.launcher.n_jobs=4", num=5)
    plan = sweeps.configure_job_resources(cfg)
    assert plan.gpu == 0 and list(cfg.trainer.devices) == [0]  # the first free GPU slot
    plan.release()


def test_fewer_jobs_than_workers_get_more_threads_and_a_sequential_sweep_is_left_alone(sweep_job, monkeypatch):
    monkeypatch.setattr(sweeps, "cpu_cores", lambda: 8)
    grid = ["model.num_heads=2,4", "model.embedding_dim=32"]  # 2 jobs, 8 workers: 4 threads each
    cfg = sweep_job("hydra/launcher=parallel", "hydra.launcher.n_jobs=8", sweep_overrides=grid)
    assert sweeps.configure_job_resources(cfg).threads == 4
    cfg = sweep_job("hydra/launcher=parallel", "hydra.launcher.n_jobs=-1", sweep_overrides=["seed=1,2,3,4"])
    assert sweeps.concurrent_jobs(HydraConfig.get()) == 4  # joblib's -1: every core, capped by the sweep
    cfg = sweep_job("model.num_heads=2")  # Hydra's basic launcher: one job at a time, threads as they are
    assert sweeps.configure_job_resources(cfg) is None


def test_the_parallel_launcher_defaults_to_every_core_or_every_gpu(sweep_job, monkeypatch):
    monkeypatch.setattr(sweeps, "cpu_cores", lambda: 6)
    monkeypatch.setattr(sweeps, "gpu_count", lambda: 0)
    assert sweep_job("hydra/launcher=parallel").hydra.launcher.n_jobs == 6
    monkeypatch.setattr(sweeps, "gpu_count", lambda: 2)
    assert sweep_job("hydra/launcher=parallel", "sweep.jobs_per_gpu=3").hydra.launcher.n_jobs == 6
    assert sweep_job("hydra/launcher=parallel", "trainer=cpu").hydra.launcher.n_jobs == 6
    with pytest.raises(Exception, match="sweep.jobs_per_gpu must be a positive integer"):
        _ = sweep_job("hydra/launcher=parallel", "sweep.jobs_per_gpu=0").hydra.launcher.n_jobs


def test_bad_sweep_keys_are_refused_with_the_fix():
    from hydra.errors import HydraException

    from src.cli import compose, explain

    message = "sweep.jobs_per_gpu must be a positive integer, got 0: e.g. sweep.jobs_per_gpu=2"
    with pytest.raises(ValueError, match=re.escape(message)):
        sweeps.check_sweep_config(compose("train", ["sweep.jobs_per_gpu=0"]))
    for override in ("sweep.jobs_per_gpu=two", "sweep.media=maybe"):  # the schema's types refuse these
        with pytest.raises(HydraException) as err:
            compose("train", [override])
        assert explain(err.value, "train", [override]).startswith(override.split("=")[0] + ": ")
    sweeps.check_sweep_config(compose("train", ["sweep.jobs_per_gpu=4", "sweep.media=true"]))


def test_sweep_jobs_skip_media_unless_asked(sweep_job):
    cfg = sweeps.sweep_defaults(sweep_job("model.num_heads=2"))
    assert cfg.callbacks.sample_text is None and cfg.callbacks.attention_maps is None
    assert cfg.sample.max_new_tokens == 0 and cfg.callbacks.model_checkpoint is not None
    cfg = sweeps.sweep_defaults(sweep_job("sample.max_new_tokens=50", "callbacks.attention_maps.prompt=ab"))
    assert cfg.sample.max_new_tokens == 50 and cfg.callbacks.attention_maps.prompt == "ab"
    assert cfg.callbacks.sample_text is None
    kept = sweep_job("sweep.media=true")
    assert sweeps.sweep_defaults(kept).callbacks.sample_text.max_new_tokens == 200
    HydraConfig.instance().cfg = None  # a single run is never changed
    assert sweeps.sweep_defaults(kept).sample.max_new_tokens == 300


def job(num, loss, parameters, *overrides, status="ok"):
    return {"job": num, "status": status, "best_val_loss": loss, "parameters": parameters, "overrides": list(overrides)}


def test_the_fit_recovers_a_known_exponent():
    sizes = [2_000, 5_000, 12_000, 40_000, 90_000, 300_000]
    rows = [job(i, 7.0 * n**-0.35 + 1.6, n, f"model.embedding_dim={i}") for i, n in enumerate(sizes)]
    fit, residuals, line = sweep_analysis.scaling(rows)
    assert fit.alpha == pytest.approx(0.35, abs=1e-4) and fit.a == pytest.approx(7.0, rel=1e-3)
    assert fit.c == pytest.approx(1.6, abs=1e-4) and not fit.at_edge
    assert max(abs(r) for r in residuals.values()) < 1e-6 and "N^(-0.350)" in line
    text, _, _ = sweep_analysis.summary_text(rows)
    assert "| fit residual |" in text and text.count("0.0000 |") >= len(sizes)  # every job's residual: +-0


def test_the_summary_copes_with_one_job_two_sizes_failures_and_no_finite_loss(tmp_path):
    one = [job(0, 2.5, 10_000, "model.embedding_dim=32")]
    assert sweep_analysis.scaling(one)[0] is None and "1 distinct parameter count" in sweep_analysis.scaling(one)[2]
    two = [*one, job(1, 2.3, 20_000, "model.embedding_dim=48"), job(2, 2.2, 20_000, "model.embedding_dim=48")]
    assert "needs at least 3" in sweep_analysis.scaling(two)[2]
    broken = [
        job(0, math.inf, 10_000, "model.num_heads=2"),
        job(1, math.nan, 20_000, "model.num_heads=4"),
        job(2, None, None, "model.num_heads=3", status="failed"),
        {"job": 3, "status": "missing"},
    ]
    text, fit, residuals = sweep_analysis.summary_text(broken)
    assert fit is None and "0 distinct" in text and text.count("no finite val loss") == 2
    save_png(sweep_figure(broken, ["model.num_heads"], fit, residuals), str(tmp_path / "summary.png"))
    assert (tmp_path / "summary.png").stat().st_size > 0  # all losses inf: no "cannot be log-scaled"
    rising = [job(i, 2.0 + 0.1 * i, n, f"model.embedding_dim={i}") for i, n in enumerate([1e3, 1e4, 1e5])]
    assert sweep_analysis.scaling(rising)[0] is None and "does not fall" in sweep_analysis.scaling(rising)[2]


def test_repeated_seeds_give_a_mean_and_spread_per_configuration(tmp_path):
    losses = {(32, 1): 2.50, (32, 2): 2.54, (32, 3): 2.46, (64, 1): 2.20, (64, 2): 2.30}
    rows = [
        {**job(i, loss, d * 100, f"model.embedding_dim={d}", f"seed={s}"), "run_name": f"embedding_dim={d},seed={s}"}
        for i, ((d, s), loss) in enumerate(losses.items())
    ]
    rows.append(job(5, None, None, "model.embedding_dim=64", "seed=3", status="failed"))
    groups = {g.label: g for g in sweep_analysis.seed_groups(rows)}
    assert groups["embedding_dim=32"].mean == pytest.approx(2.50) and groups["embedding_dim=32"].std == pytest.approx(
        0.04
    )
    assert groups["embedding_dim=64"].jobs == [3, 4] and groups["embedding_dim=64"].std == pytest.approx(
        0.0707, abs=1e-4
    )
    text, _, _ = sweep_analysis.summary_text(rows)
    assert "| embedding_dim=64 | 6,400 | 2.2500 | 0.0707 | 2 | 3, 4 |" in text
    assert "| embedding_dim=32 | 3,200 | 2.5000 | 0.0400 | 3 | 0, 1, 2 |" in text
    save_png(sweep_figure(rows, ["model.embedding_dim", "seed"]), str(tmp_path / "summary.png"))
    assert sweep_analysis.seed_groups(rows[:1] + rows[3:4]) is None  # no configuration repeats: no seed table
