"""`python -m src.<command> --help` (issue 36, item 10; issue 43): Hydra's --help, its template
${command_help:<command>} filled from the composed config (each key's default) and the schemas
(each key's one line, the field's metadata["help"]): the groups' options and the common keys."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from src.evaluate import EvaluateSchema
from src.explore import ExploreSchema
from src.export.__main__ import ExportSchema
from src.generate import GenerateSchema
from src.model import GPTConfig, SeedGPTConfig
from src.plot_attention import PlotAttentionSchema
from src.run import config
from src.run.cli import compose
from src.training.optim import OPTIMIZERS
from tests.helpers import run_cli, run_main

COMMANDS = ("train", "generate", "evaluate", "explore", "export", "plot_attention")


def listed(stdout: str) -> dict[str, str]:
    """The keys section of a --help: key -> its line (the description, joined over wrapped lines)."""
    section = stdout.split("their defaults (key=value on the command line):\n", 1)[1].split("\n\n", 1)[0]
    keys: dict[str, str] = {}
    last = None
    for line in section.splitlines():
        match = re.match(r"^  (\S+?)=(.*?)(?:  +(.*))?$", line)
        if match and not line.startswith("   "):
            last = match.group(1)
            keys[last] = (match.group(3) or "").strip()
        elif last is not None:
            keys[last] = (keys[last] + " " + line.strip()).strip()
    return keys


@pytest.mark.parametrize("command", [pytest.param("train", marks=pytest.mark.slow), *COMMANDS[1:]])
def test_help_lists_the_groups_options_and_keys_each_with_its_line(command):
    # train's as a user types it; the others' main() in this process (their command lines run elsewhere)
    result = run_cli(command, "--help") if command == "train" else run_main(command, "--help")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    keys = listed(result.stdout)
    expected = config.COMMON_KEYS.get(command)
    if expected is not None:
        assert list(keys) == list(expected)
    assert keys and all(keys.values()), [k for k, v in keys.items() if not v]  # every key has its line
    assert "_schema" not in result.stdout and "$" not in result.stdout
    if command == "train":
        for group, names in {"model": "gpt seed", "optimizer": "adamw muon sgd", "experiment": "cpu_speedrun"}.items():
            for name in names.split():
                assert re.search(rf"^  {group}={name} [* ] +\S", result.stdout, re.M), (group, name)
        assert re.search(r"^  model=gpt \* +The GPT of src/model/gpt.py", result.stdout, re.M)
        assert re.search(r"^  model.num_heads=4 +attention heads", result.stdout, re.M)
    else:  # a sampling command lists its own keys, not the training groups
        assert not re.search(r"^\s*(model|optimizer|trainer)[.=]", result.stdout, re.M)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_listed_key_is_a_key_of_the_command_at_the_default_shown(command):
    """What --help shows is what composing the command gives: the key exists and its default is the same."""
    ConfigStore.instance().store(
        name="export_schema", node=ExportSchema
    )  # export's main() stores it; the others on import
    cfg = compose(command, [], with_hydra=True)
    keys = listed(cfg.hydra.help.template)  # Hydra's --help prints this template
    parser = OverridesParser.create()
    for line in cfg.hydra.help.template.splitlines():
        match = re.match(r"^  (\S+?)=(.*?)(?:  +.*)?$", line)
        if match is None or match.group(1) not in keys:
            continue
        name, default = match.groups()
        shown = parser.parse_overrides([f"{name}={default}"])[0].value()
        if isinstance(shown, str):
            shown = shown.encode().decode("unicode_escape")  # prompt='ROMEO:\nO, ...' as --help writes it
        assert shown == OmegaConf.select(cfg, name), (name, default)


SCHEMAS = (GPTConfig, SeedGPTConfig, *OPTIMIZERS.values(), ExportSchema, GenerateSchema, EvaluateSchema)
SCHEMAS += (PlotAttentionSchema, ExploreSchema)
SCHEMAS += tuple(getattr(config, n) for n in dir(config) if n.endswith("Schema") and n[0].isupper())


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: s.__name__)
def test_every_key_of_a_schema_has_its_one_line(schema):
    """A key's line is written once, beside its default: the field's metadata["help"], which --help prints."""
    missing = [f.name for f in dataclasses.fields(schema) if f.name != "vocab_size" and not f.metadata.get("help")]
    assert missing == [], f"{schema.__name__}: {missing}"
