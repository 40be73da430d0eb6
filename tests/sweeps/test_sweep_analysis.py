"""In-process: how sweep jobs share the machine, their sweep defaults, and what the summary finds."""

import math
import re

import matplotlib.pyplot as plt
import pytest
import torch
from hydra.core.hydra_config import HydraConfig

from src.plots import save_png
from src.sweeps import analysis as sweep_analysis
from src.sweeps import checks as sweep_checks
from src.sweeps import resources as sweep_resources
from src.sweeps.figure import compact, sweep_figure
from src.sweeps.job import sweep_defaults


def test_concurrent_jobs_divide_the_cores_and_take_a_gpu_each():
    assert sweep_resources.plan_resources(4, cores=16, gpus=0, accelerator="auto", devices=1) == (4, False)
    # never 0 threads
    assert sweep_resources.plan_resources(3, cores=2, gpus=0, accelerator="cpu", devices=1) == (1, False)
    assert sweep_resources.plan_resources(4, cores=16, gpus=2, accelerator="gpu", devices=1) == (4, True)
    assert sweep_resources.plan_resources(3, 12, 3, "auto", 1) == (4, True)
    # a CPU trainer, a DDP job and a sequential sweep keep their devices
    assert not sweep_resources.plan_resources(4, 16, 2, "cpu", 1)[1]
    assert not sweep_resources.plan_resources(4, 16, 2, "gpu", 4)[1]
    assert not sweep_resources.plan_resources(1, 16, 2, "gpu", 1)[1]


def test_a_parallel_job_sets_its_share_of_threads(sweep_job, monkeypatch):
    monkeypatch.setattr(sweep_resources, "cpu_cores", lambda: 8)
    monkeypatch.setattr(sweep_resources, "gpu_count", lambda: 0)
    cfg = sweep_job("hydra/launcher=parallel", "hydra.launcher.n_jobs=4", num=5)
    plan = sweep_resources.configure_job_resources(cfg)
    assert plan.threads == 2 and torch.get_num_threads() == 2
    assert cfg.trainer.devices == 1  # no GPU here: devices untouched

    monkeypatch.setattr(sweep_resources, "gpu_count", lambda: 2)
    cfg = sweep_job("hydra/launcher=parallel", "hydra.launcher.n_jobs=4", num=5)
    plan = sweep_resources.configure_job_resources(cfg)
    assert plan.gpu == 0 and list(cfg.trainer.devices) == [0]  # the first free GPU slot
    plan.release()


def test_fewer_jobs_than_workers_get_more_threads_and_a_sequential_sweep_is_left_alone(sweep_job, monkeypatch):
    monkeypatch.setattr(sweep_resources, "cpu_cores", lambda: 8)
    grid = ["model.num_heads=2,4", "model.embedding_dim=32"]  # 2 jobs, 8 workers: 4 threads each
    cfg = sweep_job("hydra/launcher=parallel", "hydra.launcher.n_jobs=8", sweep_overrides=grid)
    assert sweep_resources.configure_job_resources(cfg).threads == 4
    cfg = sweep_job("hydra/launcher=parallel", "hydra.launcher.n_jobs=-1", sweep_overrides=["seed=1,2,3,4"])
    assert sweep_resources.concurrent_jobs(HydraConfig.get()) == 4  # joblib's -1: every core, capped by the sweep
    cfg = sweep_job("model.num_heads=2")  # Hydra's basic launcher: one job at a time, threads as they are
    assert sweep_resources.configure_job_resources(cfg) is None


def test_the_parallel_launcher_defaults_to_every_core_or_every_gpu(sweep_job, monkeypatch):
    monkeypatch.setattr(sweep_resources, "cpu_cores", lambda: 6)
    monkeypatch.setattr(sweep_resources, "gpu_count", lambda: 0)
    assert sweep_job("hydra/launcher=parallel").hydra.launcher.n_jobs == 6
    monkeypatch.setattr(sweep_resources, "gpu_count", lambda: 2)
    assert sweep_job("hydra/launcher=parallel", "sweep.jobs_per_gpu=3").hydra.launcher.n_jobs == 6
    assert sweep_job("hydra/launcher=parallel", "trainer=cpu").hydra.launcher.n_jobs == 6
    with pytest.raises(Exception, match="sweep.jobs_per_gpu must be a positive integer"):
        _ = sweep_job("hydra/launcher=parallel", "sweep.jobs_per_gpu=0").hydra.launcher.n_jobs


def test_bad_sweep_keys_are_refused_with_the_fix():
    from hydra.errors import HydraException

    from src.run.cli import compose, explain

    message = "sweep.jobs_per_gpu must be a positive integer, got 0: e.g. sweep.jobs_per_gpu=2"
    with pytest.raises(ValueError, match=re.escape(message)):
        sweep_checks.check_sweep_job(compose("train", ["sweep.jobs_per_gpu=0"]), [])
    for override in ("sweep.jobs_per_gpu=two", "sweep.media=maybe"):  # the schema's types refuse these
        with pytest.raises(HydraException) as err:
            compose("train", [override])
        assert explain(err.value, "train", [override]).startswith(override.split("=")[0] + ": ")
    sweep_checks.check_sweep_job(compose("train", ["sweep.jobs_per_gpu=4", "sweep.media=true"]), [])


def test_sweep_jobs_skip_media_unless_asked(sweep_job):
    cfg = sweep_defaults(sweep_job("model.num_heads=2"))
    assert cfg.callbacks.sample_text is None and cfg.callbacks.attention_maps is None
    assert cfg.sample.max_new_tokens == 0 and cfg.callbacks.model_checkpoint is not None
    cfg = sweep_defaults(sweep_job("sample.max_new_tokens=50", "callbacks.attention_maps.prompt=ab"))
    assert cfg.sample.max_new_tokens == 50 and cfg.callbacks.attention_maps.prompt == "ab"
    assert cfg.callbacks.sample_text is None
    kept = sweep_job("sweep.media=true")
    assert sweep_defaults(kept).callbacks.sample_text.max_new_tokens == 200
    HydraConfig.instance().cfg = None  # a single run is never changed
    assert sweep_defaults(kept).sample.max_new_tokens == 300


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
    assert sweep_analysis.scaling(one)[0] is None and "1 model size(s)" in sweep_analysis.scaling(one)[2]
    two = [*one, job(1, 2.3, 20_000, "model.embedding_dim=48"), job(2, 2.2, 20_000, "model.embedding_dim=48")]
    assert "needs at least 4 sizes" in sweep_analysis.scaling(two)[2]
    broken = [
        job(0, math.inf, 10_000, "model.num_heads=2"),
        job(1, math.nan, 20_000, "model.num_heads=4"),
        job(2, None, None, "model.num_heads=3", status="failed"),
        {"job": 3, "status": "missing"},
    ]
    text, fit, residuals = sweep_analysis.summary_text(broken)
    assert fit is None and "No fit: 0 model size(s)" in text and text.count("no finite val loss") == 2
    save_png(sweep_figure(broken, ["model.num_heads"], fit, residuals), str(tmp_path / "summary.png"))
    assert (tmp_path / "summary.png").stat().st_size > 0  # all losses inf: no "cannot be log-scaled"
    rising = [job(i, 2.0 + 0.1 * i, n, f"model.embedding_dim={i}") for i, n in enumerate([1e3, 1e4, 1e5, 1e6])]
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
    assert "| embedding_dim=64 | 6,400 | 2.2500 | 0.0707 | - - - - | - | - | 2 | 3, 4 |" in text
    assert "| embedding_dim=32 | 3,200 | 2.5000 | 0.0400 | - - - - | - | - | 3 | 0, 1, 2 |" in text
    save_png(sweep_figure(rows, ["model.embedding_dim", "seed"]), str(tmp_path / "summary.png"))
    assert sweep_analysis.seed_groups(rows[:1] + rows[3:4]) is None  # no configuration repeats: no seed table


SIZES = (1e3, 4e3, 1.6e4, 6.4e4, 2.56e5)


def seeded(losses_by_size: dict[int, list[float]]) -> list[dict]:
    """Jobs of a seeded size sweep: every size with one job per seed, as result.json rows."""
    rows = []
    for n, losses in losses_by_size.items():
        for seed, loss in enumerate(losses, 1):
            rows.append(
                {
                    **job(len(rows), loss, n, f"model.embedding_dim={n}", f"seed={seed}"),
                    "run_name": f"embedding_dim={n},seed={seed}",
                }
            )
    return rows


def fit_drawn(figure) -> bool:
    return any(line.get_linestyle() == "--" for ax in figure.axes for line in ax.get_lines())


@pytest.mark.parametrize(
    "losses_by_size,why",
    [
        # the sweep: three sizes (any three falling points take a curve exactly)
        ({4160: [3.7058, 3.6862], 14464: [3.5008, 3.4717], 53504: [3.3699, 3.3786]}, "needs at least 4 sizes"),
        # loss linear in log N: the exponent runs to the bottom of its range
        ({10**k: [3.0 - 0.1 * k, 3.0 - 0.1 * k + 1e-4] for k in range(3, 7)}, "ran to the end of its search range"),
        # a power law with one size 0.03 off, where the seeds agree to 0.001
        (
            {n: [5 * n**-0.3 + 1.5 + (0.03 if n == 1.6e4 else 0) + e for e in (1e-3, -1e-3)] for n in SIZES},
            "more than twice the seeds' spread",
        ),
    ],
)
def test_no_meaningless_fit_in_either_file(tmp_path, losses_by_size, why):
    rows = seeded(losses_by_size)
    text, fit, residuals = sweep_analysis.summary_text(rows)
    assert fit is None and residuals == {} and why in text
    assert not re.search(r"L\(N\) = \d", text) and "fit residual" not in text
    figure = sweep_figure(rows, ["model.embedding_dim", "seed"], fit, residuals)
    assert not fit_drawn(figure) and len(figure.axes) == 2  # no curve, no residual panel
    assert "no power-law fit" in figure._suptitle.get_text()


def test_a_power_law_within_the_seed_noise_is_fitted_and_drawn():
    noise = [0.004, -0.004]
    rows = seeded({n: [5.0 * n**-0.3 + 1.5 + e for e in noise] for n in SIZES})
    text, fit, residuals = sweep_analysis.summary_text(rows)
    assert fit is not None and fit.alpha == pytest.approx(0.3, abs=0.02)
    assert "within twice the seeds' spread" in text and "| fit residual |" in text
    figure = sweep_figure(rows, ["model.embedding_dim", "seed"], fit, residuals)
    assert fit_drawn(figure) and len(figure.axes) == 3


def test_the_sweep_plot_ticks_are_the_swept_values_and_seeds_do_not_share_a_spot():
    rows = seeded({n: [3.0 - 0.1 * i, 3.01 - 0.1 * i] for i, n in enumerate((16, 32, 64))})
    for row, width in zip(rows, (16, 16, 32, 32, 64, 64), strict=True):
        row["overrides"][0] = f"model.embedding_dim={width}"
    figure = sweep_figure(rows, ["model.embedding_dim", "seed"])
    swept, size = figure.axes
    assert [t.get_text() for t in swept.get_xticklabels()] == ["16", "32", "64"]
    assert [t.get_text() for t in size.get_xticklabels()] == ["16", "32", "64"]  # parameter counts, plainly
    assert size.get_xscale() == "linear"  # log10 positions on a linear axis: no 4x10^3 minor labels to overlap
    for ax in (swept, size):
        spots = [t.xy for t in ax.texts]  # each job's label sits at its own point
        assert len(spots) == len(rows) and len(set(spots)) == len(rows)


def test_the_title_of_a_one_column_plot_stays_inside_it():
    """A sweep of one key over models of one size draws one column, 4 inches wide: its title ran off both sides."""
    rows = [job(i, loss, 14_464, f"trainer.flops={c}") for i, (c, loss) in enumerate(((3e8, 4.05), (6e8, 3.66)))]
    figure = sweep_figure(rows, ["trainer.flops"])
    assert len(figure.axes) == 1
    figure.canvas.draw()
    (title,) = figure.texts
    box, page = title.get_window_extent(), figure.bbox
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and "no power-law fit" in title.get_text()


def test_tick_labels_stay_short_up_to_a_flop_budget():
    labels = [compact(v) for v in (16, 0.003, 4160, 1.2e6, 5e11, 1e12, 2e12)]
    assert labels == ["16", "0.003", "4.16K", "1.2M", "500G", "1T", "2T"]  # not 1e+03G


def heads_of(seed: int, induction_heads: int) -> dict:
    """result.json's "heads" as src/training/heads.py writes it."""
    return {
        "previous_token_heads": 1,
        "duplicate_token_heads": 0,
        "induction_heads": induction_heads,
        "first_token_heads": seed,
        "best_induction": 0.3 + 0.1 * induction_heads + 0.02 * seed,
        "in_context": -0.2 * induction_heads,
        "in_context_text": -0.1,
        "max_k_composition": 0.1 * induction_heads,
        "most_copying_positivity": 0.9 + 0.01 * seed,
    }


def test_the_summary_counts_each_kind_of_head_and_seeds_average_them(tmp_path):
    rows = [
        {**job(i, 2.0 + 0.01 * s, h * 100, f"model.num_heads={h}", f"seed={s}"), "heads": heads_of(s, h // 2)}
        for i, (h, s) in enumerate([(2, 1), (2, 2), (4, 1), (4, 2)])
    ]
    rows.append({**job(4, 2.5, 800, "model.num_heads=8", "seed=1"), "heads": None})  # scores switched off
    table = sweep_analysis.format_table(rows)
    assert "| heads of each kind | best induction | in-context |" in table
    assert "| prev 1 dup 0 ind 2 first 1 | 0.52 | -0.400 | 0.20 | +0.91 |" in table  # job 2: 4 heads, seed 1
    assert "| in-context | max K-comp | copying OV |" in table  # the circuits (src/model/circuits.py)
    assert "| - | - | - | - | - |" in table  # job 4: no scores
    text, _, _ = sweep_analysis.summary_text(rows)
    assert "| 1.0 0.0 2.0 1.5 | 0.53 | -0.400 | 2 | 2, 3 |" in text  # num_heads=4: means over seeds 1, 2
    assert "| 1.0 0.0 1.0 1.5 | 0.43 | -0.200 | 2 | 0, 1 |" in text
    figure = sweep_figure(rows, ["model.num_heads", "seed"])
    assert len(figure.axes) >= 3 * 2  # loss, heads of each kind, scores: for num_heads and parameters
    save_png(figure, str(tmp_path / "summary.png"))


def test_no_two_job_labels_of_a_12_job_sweep_figure_touch():
    """The notes' 12-job grid (4 widths x 3 head counts): three jobs share each width and sit close
    together, where two-digit labels ("10", "11") used to run into each other."""
    rows = [
        {
            "job": 3 * i + h,
            "status": "ok",
            "best_val_loss": 2.0 + 300 / d + 0.02 * h,
            "parameters": 12 * d * d + 65 * d,
            "overrides": [f"model.embedding_dim={d}", f"model.num_heads={h + 1}"],
        }
        for i, d in enumerate((30, 60, 90, 120))
        for h in range(3)
    ]
    fit, residuals, _ = sweep_analysis.scaling(rows)
    figure = sweep_figure(rows, ["model.embedding_dim", "model.num_heads"], fit, residuals)
    try:
        renderer = figure.canvas.get_renderer()
        for ax in figure.axes:
            labels = [t.get_window_extent(renderer) for t in ax.texts]
            assert len(labels) == 12
            touching = [(a, b) for i, a in enumerate(labels) for b in labels[i + 1 :] if a.overlaps(b)]
            assert not touching, f"{ax.get_xlabel()}: job labels overlap"
    finally:
        plt.close(figure)


def test_the_plot_draws_no_seed_noise_as_a_slope_no_constant_panel_and_no_empty_legend():
    """Issue 47, item 6: 0.0026 nats of seed noise filled the loss axis as a steep rise, the size panel of a
    sweep of one size repeated the same point, and "heads of each kind" was an empty panel."""
    kinds = {"previous_token_heads": 0, "duplicate_token_heads": 0, "induction_heads": 0, "first_token_heads": 0}
    rows = [
        {
            **job(i, 2.0 + 0.0013 * i, 5_000, f"optimizer.lr={lr}", f"seed={s}"),
            "heads": {**kinds, "best_induction": 0.1},
        }
        for i, (lr, s) in enumerate([(0.001, 1), (0.001, 2), (0.003, 1)])
    ]
    figure = sweep_figure(rows, ["optimizer.lr", "seed"])
    loss, counts, _scores, *_ = figure.axes
    assert loss.get_xlabel() == "optimizer.lr" and len(figure.get_axes()) == 4  # lr's three rows; no size panel
    low, high = loss.get_ylim()
    assert high - low == pytest.approx(0.05)  # not 0.0026 stretched over the axis
    assert [t.get_text() for t in counts.texts] == ["no head of any kind in any job"] and counts.get_legend() is None
    seeds_only = sweep_figure([job(i, 2.0 + 0.001 * i, 5_000, f"seed={i}") for i in range(3)], ["seed"])
    assert [ax.get_xlabel() for ax in seeds_only.axes] == ["seed"]
