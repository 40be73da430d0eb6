"""`python -m src.<command> --help`: the command's groups and its common keys, each with one line
read from where it is written, before torch, Lightning or Hydra load (a tenth of a second, not six).

Nothing here is written twice. A key's line is the comment beside it (or right above it) where its
value is typed: the YAML file under conf/ that sets it, else the dataclass its schema is read from
(SCHEMAS: the model's config, the optimizer's settings, the command's schema). An option's line is
the first sentence of its YAML file's opening comment. The files are read as text (yaml, ast),
never imported, so help costs no more than reading them.
"""

from __future__ import annotations

import ast
import io
import re
import shutil
import sys
import textwrap
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import yaml

PROJECT_ROOT = Path(__file__).resolve().parents[2]

# The keys people change most, as `--help` lists them; a command not named here lists all its own keys.
COMMON_KEYS = {
    "train": (
        "model.num_heads",
        "model.embedding_dim",
        "model.context_window",
        "model.num_layers",
        "model.positional",
        "model.dropout",
        "model.norm",
        "model.activation",
        "data.batch_size",
        "data.path",
        "data.val_tokens",
        "data.sampling",
        "optimizer.lr",
        "optimizer.warmup_steps",
        "trainer.max_steps",
        "trainer.val_check_interval",
        "trainer.log_every_n_steps",
        "seed",
        "ckpt_path",
        "finetune",
        "sample.prompt",
        "explorer",
    ),
}

# A schema's name (as conf/'s defaults lists name it) -> the file and class it is read from
# (src/run/config.py registers these; tests/run/test_help.py checks that the two agree).
SCHEMAS = {
    "train_schema": ("src/run/config.py", "TrainSchema"),
    "generate_schema": ("src/run/config.py", "GenerateSchema"),
    "evaluate_schema": ("src/run/config.py", "EvaluateSchema"),
    "plot_attention_schema": ("src/run/config.py", "PlotAttentionSchema"),
    "explore_schema": ("src/run/config.py", "ExploreSchema"),
    "export_schema": ("src/export/__main__.py", "ExportSchema"),
    "gpt_schema": ("src/model/gpt.py", "GPTConfig"),
    "seed_schema": ("src/model/seed_gpt.py", "SeedGPTConfig"),
    "adamw_schema": ("src/training/optim.py", "AdamW"),
    "sgd_schema": ("src/training/optim.py", "SGD"),
    "muon_schema": ("src/training/optim.py", "Muon"),
}


@dataclass
class Key:
    """One key as --help shows it: its default as typed, its one line, and the file that line is in."""

    default: str
    description: str
    source: str


def comment_above(lines: list[str], row: int) -> str:
    """The comment lines right above line `row` (0-based), joined; '' when a blank or code line is there."""
    above = []
    while row > 0 and lines[row - 1].strip().startswith("#") and not lines[row - 1].startswith("# @package"):
        row -= 1
        above.insert(0, lines[row].strip().lstrip("#").strip())
    return " ".join(line for line in above if line)


def yaml_keys(path: Path, root: Path) -> dict[str, Key]:
    """Every key a YAML file sets (dotted, `sample.prompt`), with its value as typed and its comment."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    keys: dict[str, Key] = {}

    def walk(node: yaml.MappingNode, prefix: str) -> None:
        for key_node, value in node.value:
            name = f"{prefix}{key_node.value}"
            if name in ("defaults", "hydra") and not prefix:
                continue
            row = key_node.start_mark.line
            if isinstance(value, yaml.ScalarNode):
                typed = "null" if value.value in ("", "~") and not value.style else as_typed(value.value)
                after = lines[value.end_mark.line][value.end_mark.column :] if value.end_mark.line == row else ""
            else:
                typed = "..."
                after = lines[row][key_node.end_mark.column :].lstrip(":")
            inline = after.strip()[1:].strip() if after.strip().startswith("#") else ""
            rel = str(path.relative_to(root))
            keys[name] = Key(typed, first_sentence(inline or comment_above(lines, row)), rel)
            if isinstance(value, yaml.MappingNode):
                walk(value, f"{name}.")

    document = yaml.compose(text)
    if isinstance(document, yaml.MappingNode):
        walk(document, "")
    return keys


def dataclass_keys(path: Path, class_name: str, root: Path) -> dict[str, Key]:
    """Every field of a dataclass in a Python file (read, not imported), with its default and comment;
    a field typed by another dataclass of the same file (`sample: SampleSchema`) adds that one's fields."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    comments = {
        token.start[0] - 1: token.string.lstrip("#").strip()
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    }
    classes = {node.name: node for node in ast.parse(source).body if isinstance(node, ast.ClassDef)}
    keys: dict[str, Key] = {}

    def walk(name: str, prefix: str) -> None:
        for item in classes[name].body:
            if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
                continue
            field = f"{prefix}{item.target.id}"
            inline = comments.get(item.end_lineno - 1, "")
            described = first_sentence(inline or comment_above(lines, item.lineno - 1))
            keys[field] = Key(typed_default(item.value), described, str(path.relative_to(root)))
            nested = ast.unparse(item.annotation)
            if nested in classes:
                walk(nested, f"{field}.")

    walk(class_name, "")
    return keys


def as_typed(value: str) -> str:
    """A value as the command line takes it: quoted when it holds spaces or a newline (written \\n)."""
    if any(c in value for c in " \n,'\""):
        return "'" + value.replace("\n", "\\n").replace("'", "\\'") + "'"
    return value


def typed_default(value: ast.expr | None) -> str:
    """A field's default as a user types it on the command line: 2e-3, null, true, sinusoidal."""
    if value is None:
        return "(required)"
    if isinstance(value, ast.Call):  # field(default_factory=lambda: [0.9, 0.99]) or field(default=...)
        for keyword in value.keywords:
            if keyword.arg in ("default", "default_factory"):
                inner = keyword.value.body if isinstance(keyword.value, ast.Lambda) else keyword.value
                return typed_default(inner)
        return "..."
    if isinstance(value, ast.Constant):
        if value.value is None:
            return "null"
        if isinstance(value.value, bool):
            return str(value.value).lower()
        if isinstance(value.value, str):
            return as_typed(value.value)
    return ast.unparse(value)


def defaults_list(path: Path) -> list:
    return (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("defaults", [])


def config_keys(path: Path, root: Path) -> dict[str, Key]:
    """A config file's keys: its schema's fields, with what the YAML itself types over them."""
    keys: dict[str, Key] = {}
    for entry in defaults_list(path):
        if isinstance(entry, str) and entry in SCHEMAS:
            file, class_name = SCHEMAS[entry]
            keys.update(dataclass_keys(root / file, class_name, root))
    for name, key in yaml_keys(path, root).items():
        schema = keys.get(name)
        if schema is not None and not key.description:  # the value typed here, the line written there
            key = Key(key.default, schema.description, schema.source)
        keys[name] = key
    return keys


def composed_groups(config_name: str, root: Path) -> dict[str, str | None]:
    """The config groups a command's defaults list composes, each with its default option (None: none
    unless chosen); Hydra's group that this project gives options, hydra/launcher, as one of them."""
    chosen: dict[str, str | None] = {}
    for entry in defaults_list(root / "conf" / f"{config_name}.yaml"):
        if isinstance(entry, dict):
            group, default = next(iter(entry.items()))
            if group == "hydra":
                for launcher in sorted(p.name for p in (root / "conf" / "hydra").iterdir() if p.is_dir()):
                    chosen[f"hydra/{launcher}"] = None
            elif not group.startswith("override "):
                chosen[group] = default
    return chosen


def groups(config_name: str, root: Path) -> dict[str, str | None]:
    """The groups a user chooses from: not paths, data or callbacks, whose one option is the default."""
    return {g: d for g, d in composed_groups(config_name, root).items() if options(g, root) != [d]}


def options(group: str, root: Path) -> list[str]:
    return sorted(p.stem for p in (root / "conf" / group).glob("*.yaml"))


def option_line(path: Path) -> str:
    """The first sentence of a config file's opening comment (after `# @package`)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    header = []
    for line in lines:
        if line.startswith("# @package"):
            continue
        if not line.startswith("#"):
            break
        header.append(line.lstrip("#").strip())
    return first_sentence(" ".join(h for h in header if h))


def first_sentence(text: str) -> str:
    """Up to the first full stop that ends a sentence (not the one of "e.g.")."""
    match = re.match(r"(.+?(?<!e\.g)(?<!i\.e)[.!?])(\s|$)", text)
    return match.group(1) if match else text


def command_keys(config_name: str, root: Path = PROJECT_ROOT) -> dict[str, Key]:
    """Every key `python -m src.<config_name>` takes at its defaults, dotted, with its default and line."""
    keys = config_keys(root / "conf" / f"{config_name}.yaml", root)
    for group, default in composed_groups(config_name, root).items():
        if default is None or "/" in group:
            continue
        for name, key in config_keys(root / "conf" / group / f"{default}.yaml", root).items():
            keys[f"{group}.{name}"] = key
    return keys


def listed_keys(config_name: str, root: Path = PROJECT_ROOT) -> dict[str, Key]:
    """The keys --help lists: the command's common keys, or all its own (not the paths group)."""
    keys = command_keys(config_name, root)
    names = COMMON_KEYS.get(config_name) or [k for k in keys if "." not in k and k != "paths" and not k.startswith("_")]
    return {name: keys[name] for name in names}


def help_text(config_name: str, root: Path = PROJECT_ROOT) -> str:
    """The whole --help text of one command."""
    width = min(shutil.get_terminal_size((100, 24)).columns, 120)
    first = option_line(root / "conf" / f"{config_name}.yaml")
    out = [f"python -m src.{config_name} [key=value ...] [-m]", "", textwrap.fill(first, width), ""]

    def row(left: str, text: str, pad: int) -> list[str]:
        wrapped = textwrap.wrap(text, max(width - pad - 4, 30)) or [""]
        return [f"  {left:<{pad}}  {wrapped[0]}"] + [" " * (pad + 4) + more for more in wrapped[1:]]

    chosen = groups(config_name, root)
    if chosen:
        out.append("Config groups, one option each (group=option; * the default):")
        pad = max(len(f"{g}={o}") for g in chosen for o in options(g, root)) + 2
        for group, default in chosen.items():
            for option in options(group, root):
                mark = "*" if option == default else " "
                out += row(f"{group}={option} {mark}", option_line(root / "conf" / group / f"{option}.yaml"), pad)
        out.append("")
    keys = listed_keys(config_name, root)
    common = config_name in COMMON_KEYS
    out.append(("Common keys" if common else "Keys") + " and their defaults (key=value on the command line):")
    pad = max(len(f"{name}={key.default}") for name, key in keys.items())
    pad = min(pad, 34)
    for name, key in keys.items():
        left = f"{name}={key.default}"
        if len(left) > pad:
            out += [f"  {left}"] + row("", key.description, pad)
        else:
            out += row(left, key.description, pad)
    out += ["", f"Every key, with the overrides applied:  python -m src.{config_name} [key=value ...] --cfg job"]
    if common:
        out.append("Schemas and the meaning of each key: src/run/config.py, conf/ (README: Train)")
    out.append(f"Hydra's own flags (--cfg, --info, -m ...):  python -m src.{config_name} --hydra-help")
    return "\n".join(out) + "\n"


def exit_on_help(config_name: str, argv: list[str] | None = None) -> None:
    """Print help and exit 0 when the command line asks for it (-h, --help), before any library loads."""
    argv = sys.argv[1:] if argv is None else argv
    if "--help" in argv or "-h" in argv:
        print_help(config_name)


def print_help(config_name: str) -> NoReturn:
    try:
        sys.stdout.write(help_text(config_name))
        sys.stdout.flush()
    except BrokenPipeError:  # `--help | head`
        pass
    sys.exit(0)
