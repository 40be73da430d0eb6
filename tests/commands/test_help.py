"""`python -m src.<command> --help` (issue 36, item 10): the groups and the common keys, each with one
line read from where it is written, answered before torch, Lightning or Hydra load."""

from __future__ import annotations

import dataclasses
import importlib
import re
import shutil
import subprocess
import sys

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from src.run import help as cli_help
from src.run.cli import compose
from tests.helpers import ROOT

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


def help_process(command: str, flag: str = "--help") -> tuple[subprocess.CompletedProcess, set[str]]:
    """`python -m src.<command> --help` as a user types it, and the top-level packages it imported."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", f"src.{command}", flag], cwd=ROOT, capture_output=True, text=True
    )
    imported = {line.split("|")[-1].strip().split(".")[0] for line in result.stderr.splitlines() if "|" in line}
    result.stderr = "\n".join(line for line in result.stderr.splitlines() if not line.startswith("import time:"))
    return result, imported


@pytest.mark.parametrize("command", COMMANDS)
def test_help_lists_the_groups_options_and_keys_each_with_its_line(command):
    """Every command's --help (generate's as -h), in a process: its text, and that it loads no library
    (why it is fast, 0.3 s, not 6 s: BENCHMARKS.md, "--help"): it reads files, it imports none."""
    result, imported = help_process(command, "-h" if command == "generate" else "--help")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert imported.isdisjoint({"torch", "lightning", "hydra", "omegaconf", "numpy"}), imported & {"torch", "hydra"}
    keys = listed(result.stdout)
    expected = cli_help.COMMON_KEYS.get(command)
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
    if command == "export":  # its schema is stored by its module, as it runs
        from hydra.core.config_store import ConfigStore

        from src.export.__main__ import ExportSchema

        ConfigStore.instance().store(name="export_schema", node=ExportSchema)
    cfg = compose(command, [])
    parser = OverridesParser.create()
    for name, key in cli_help.listed_keys(command).items():
        composed = OmegaConf.select(cfg, name, throw_on_missing=False)
        shown = parser.parse_overrides([f"{name}={key.default}"])[0].value()
        if isinstance(shown, str):
            shown = shown.encode().decode("unicode_escape")  # prompt='ROMEO:\nO, ...' as --help writes it
        assert shown == composed, (name, key.default, composed)
        assert key.description, name


def test_no_key_is_described_twice():
    """A key's line is in one place: the YAML that sets it or the dataclass of its schema, never both."""
    twice = []
    for path in sorted((ROOT / "conf").rglob("*.yaml")):
        schema: dict = {}
        for entry in cli_help.defaults_list(path):
            if isinstance(entry, str) and entry in cli_help.SCHEMAS:
                file, name = cli_help.SCHEMAS[entry]
                schema = cli_help.dataclass_keys(ROOT / file, name, ROOT)
        for name, key in cli_help.yaml_keys(path, ROOT).items():
            if key.description and name in schema and schema[name].description:
                twice.append(f"{path.relative_to(ROOT)}: {name}")
    assert twice == []


def test_the_schema_sources_are_the_schemas_classes():
    """help.py reads each schema's fields from a file, as text; they are the fields of the class there."""
    for file, class_name in cli_help.SCHEMAS.values():
        module = importlib.import_module(file.removesuffix(".py").replace("/", "."))
        read = {key for key in cli_help.dataclass_keys(ROOT / file, class_name, ROOT) if "." not in key}
        assert read == {f.name for f in dataclasses.fields(getattr(module, class_name))}, class_name


def test_a_line_changed_where_it_is_written_changes_in_help(tmp_path):
    """The help is read from the sources, not a copy: edit a dataclass's comment and a YAML comment
    in a copy of the project and its --help says the new words."""
    for part in ("src", "conf"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    gpt = tmp_path / "src" / "model" / "gpt.py"
    before = "num_heads: int = 4  # attention heads h, each d / h wide"
    assert before in gpt.read_text()
    gpt.write_text(gpt.read_text().replace(before, "num_heads: int = 4  # heads that read the stream in parallel"))
    data = tmp_path / "conf" / "data" / "shakespeare.yaml"
    text = data.read_text()
    assert "batch_size: 32  # windows of model.context_window characters per training step" in text
    data.write_text(text.replace("windows of model.context_window characters per training step", "rows per batch"))
    result = subprocess.run(
        [sys.executable, "-m", "src.train", "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert re.search(r"^  model.num_heads=4 +heads that read the stream in parallel$", result.stdout, re.M)
    assert re.search(r"^  data.batch_size=32 +rows per batch$", result.stdout, re.M)
    assert "attention heads h" not in result.stdout and "characters per training step" not in result.stdout


def test_help_through_hydra_is_the_same_text():
    """hydra.help.template (Hydra's --help, when a command is called as a function) is the same text."""
    assert compose("generate", []).ckpt_path is None  # registers the resolver, as every command does
    assert OmegaConf.create({"t": "${command_help:generate}"}).t == cli_help.help_text("generate")
