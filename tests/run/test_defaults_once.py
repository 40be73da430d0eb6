"""Each default is written once, where its key is declared (a dataclass field, a constructor's
argument): a YAML file under conf/ that names a schema holds only what differs from it."""

from pathlib import Path

import pytest
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

import src.evaluate  # noqa: F401  (each command module stores its schema)
import src.explore  # noqa: F401
import src.generate  # noqa: F401
import src.plot_attention  # noqa: F401
from src.export.__main__ import ExportSchema
from src.run.config import register

CONF = Path(__file__).resolve().parents[2] / "conf"


def schema_files() -> list[Path]:
    return sorted(p for p in CONF.rglob("*.yaml") if any(str(e).endswith("_schema") for e in defaults_of(p)))


def defaults_of(path: Path) -> list:
    return list(OmegaConf.load(path).get("defaults") or [])


def copies(written: dict, default: dict, prefix: str = "") -> list[str]:
    """The keys of `written` whose value is the schema's default (nested nodes walked)."""
    found = []
    for key, value in written.items():
        if key not in default:
            continue
        if isinstance(value, dict) and isinstance(default[key], dict):
            found += copies(value, default[key], f"{prefix}{key}.")
        elif value == default[key]:
            found.append(f"{prefix}{key}")
    return found


@pytest.mark.parametrize("path", schema_files(), ids=lambda p: str(p.relative_to(CONF)))
def test_a_yaml_holds_no_copy_of_its_schema_s_defaults(path):
    register("train")
    ConfigStore.instance().store(name="export_schema", node=ExportSchema)
    group = path.parent.relative_to(CONF)
    schema = next(str(e) for e in defaults_of(path) if str(e).endswith("_schema"))
    where = f"{schema}.yaml" if str(group) == "." else f"{group}/{schema}.yaml"
    default = OmegaConf.to_container(ConfigStore.instance().load(where).node, resolve=False)
    written = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    written.pop("defaults", None), written.pop("hydra", None)
    copied = copies(written, default)
    assert copied == [], f"{path.relative_to(CONF)} copies its schema's defaults: drop {', '.join(copied)}"
