"""``docs/configuration.md`` is the table's, and no module reads a key it lacks."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

from sr3.config import KEYS
from sr3.config_doc import REGENERATE, render
from sr3.config_table import NOT_KEYS, is_config_key

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "configuration.md"
#: Where ``sr3.*`` keys are read or set.
PACKAGES = (
    "sr3",
    "zk",
    "topology_api",
    "storm_bridge",
    "spark_bridge",
    "sr3_cli",
    "topologies",
)
#: A whole string literal that looks like a key: ``"sr3.checkpoint.mode"``.
KEY_LIKE = re.compile(r"sr3(?:\.[A-Za-z0-9_-]+)+")


def test_the_committed_page_is_what_the_table_generates() -> None:
    current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
    assert current == render(), (
        f"{PAGE.relative_to(ROOT)} is out of date with sr3/config_table.py; "
        f"regenerate it with `{REGENERATE}` and commit it"
    )


def test_the_page_lists_every_key_with_its_default() -> None:
    text = render()
    for name in KEYS:
        assert f"| `{name}` |" in text


def _key_like_literals() -> list[tuple[str, str]]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and KEY_LIKE.fullmatch(node.value)
                ):
                    where = f"{path.relative_to(ROOT)}:{node.lineno}"
                    found.append((where, node.value))
    return found


def _module(name: str) -> bool:
    """Whether ``name`` is a module of ours (a logger name, as ``sr3.server``)."""
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a parent is no package: sr3.checkpoint.mode
        return False


def test_every_sr3_key_the_packages_name_is_in_the_table() -> None:
    literals = _key_like_literals()
    assert len(literals) > 50  # the scan sees the modules' keys
    unknown = [
        f"{where}: {name!r}"
        for where, name in literals
        if is_config_key(name) and name not in KEYS and not _module(name)
    ]
    assert unknown == [], (
        "these sr3.* keys are read without a row in sr3/config_table.py: add "
        "them there (or, if they are no config keys, to NOT_KEYS)\n"
        + "\n".join(unknown)
    )


def test_the_names_that_are_no_keys_are_still_used() -> None:
    used = {name for _, name in _key_like_literals()}
    assert NOT_KEYS <= used
    assert not NOT_KEYS & set(KEYS)
