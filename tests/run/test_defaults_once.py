"""Each default is written once, in the code that uses it; conf/'s YAML may repeat it for the reader
(the model's options, the data's) but must agree, except where DIFFERENT says why."""

import dataclasses
import inspect
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from src.data.datamodule import TextDataModule
from src.model import GPTConfig, SeedGPTConfig
from src.run.cli import compose
from src.run.config import SampleSchema, SweepSchema
from src.training.optim import SGD, AdamW, Muon

# (config group option, key): why conf/ sets another value than the code's default.
DIFFERENT = {
    ("optimizer=sgd", "min_lr"): "${optimizer.lr}: the code's null means the same constant rate",
    ("data", "cache_dir"): "${paths.data_dir}: where this checkout keeps its data",
    ("data", "seed"): "${seed}: the run's seed",
    ("data", "val_tokens"): "120000: bounds a validation on a big text; the class scores the whole split",
}
CONF = Path(__file__).resolve().parents[2] / "conf"
WHERE = {
    "model=gpt": ("model", GPTConfig),
    "model=seed": ("model", SeedGPTConfig),
    "optimizer=adamw": ("optimizer", AdamW),
    "optimizer=sgd": ("optimizer", SGD),
    "optimizer=muon": ("optimizer", Muon),
    "data": ("data", TextDataModule),
    "sample": ("sample", SampleSchema),
    "sweep": ("sweep", SweepSchema),
}


def code_defaults(target: type) -> dict:
    if dataclasses.is_dataclass(target):
        fields = dataclasses.fields(target)
        return {
            f.name: f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            for f in fields
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        }
    params = inspect.signature(target).parameters.values()
    return {p.name: p.default for p in params if p.default is not p.empty}


@pytest.mark.parametrize("where", WHERE)
def test_the_yaml_defaults_are_the_code_s(where):
    node, target = WHERE[where]
    cfg = compose("train", [where] if "=" in where else [])
    written = OmegaConf.to_container(cfg[node], resolve=False)
    defaults = code_defaults(target)
    differ = {
        key: (value, defaults[key])
        for key, value in written.items()
        if key in defaults and value != defaults[key] and (where, key) not in DIFFERENT
    }
    assert differ == {}, f"conf/ and the code disagree on {where}: {differ}"
    declared = {key for w, key in DIFFERENT if w == where}
    assert all(written[key] != defaults[key] for key in declared), "a declared difference is gone: drop it"


def test_an_optimizer_default_is_written_only_in_the_code():
    for name in ("adamw", "sgd", "muon"):
        yaml = OmegaConf.load(CONF / "optimizer" / f"{name}.yaml")
        assert set(yaml) - {"defaults"} <= {"min_lr"}, set(yaml)
