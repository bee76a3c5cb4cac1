"""``docs/configuration.md``, rendered from the table of keys.

``scripts/gen-config-doc.py`` writes it; a unit test fails when the committed
page differs from :func:`render`.
"""

from __future__ import annotations

import json
import typing
from typing import Final

from sr3.config import Sr3Config
from sr3.config_keys import Key, Scope
from sr3.config_table import SECTIONS, section_keys
from sr3.config_values import SIZE

__all__ = ["REGENERATE", "render"]

#: The command that rewrites the page.
REGENERATE: Final = ".venv/bin/python scripts/gen-config-doc.py"

_INTRO: Final = f"""\
# Configuration

<!-- Generated from sr3/config_table.py: edit the table, not this page, and run
`{REGENERATE}`. A unit test fails when the two differ. -->

Every `sr3.*` setting is one row of `sr3.config_table.KEYS`, read into the
frozen sections of `sr3.config.Sr3Config` (the section and attribute are given
under each heading below).

Where to set them:

- **Storm conf**: a topology's `config={{...}}`, a component's
  `spec(config={{...}})`, `sr3 run -o KEY=VALUE` (VALUE as JSON, else a
  string) or `sparse submit -o`. The Spark engine reads the same conf.
- **Environment**: the keys with a variable below (`SR3_RING_VNODES` sets
  `sr3.ring.vnodes`) are read by `sr3` commands and ring nodes.

An unset key, `null` and `""` mean the default (except where noted). A bad
value is refused with an error naming the key, the value and the accepted
values. An unknown `sr3.*` key is refused by `sr3 run -o` with the closest
known key; in a task's Storm conf it is logged as a warning and ignored.
Code reads a component's effective settings with
`Sr3Config.merged(topology_conf, overrides, component_conf)`, or one key with
`sr3.config.read_setting(conf, "sr3.checkpoint.mode")`.

## Scopes

| Scope | Where it is read |
| --- | --- |
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _size(value: int) -> str:
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value >= factor and value % factor == 0:
            return f"{value // factor}{unit}"
    return str(value)


def _default(key: Key) -> str:
    if key.default is None:
        return "unset"
    if key.kind is SIZE:
        return f"`{_size(key.default)}`"
    if key.default == ():
        return "none"
    return f"`{json.dumps(key.default)}`"


def _row(key: Key) -> str:
    env = f"`{key.env_var}`" if key.env else ""
    note = "" if key.blank else ' `""` is refused, not the default.'
    cells = (
        f"`{key.name}`",
        key.kind.name,
        _default(key),
        _cell(key.accepted_values()),
        key.scope.value,
        env,
        _cell(key.doc + note) + f" (`.{key.attr}`)",
    )
    return "| " + " | ".join(cells) + " |"


def _section(name: str) -> list[str]:
    section_type = typing.get_type_hints(Sr3Config)[name]
    title = (section_type.__doc__ or name).strip().splitlines()[0].rstrip(".")
    return [
        "",
        f"## {title}",
        "",
        f"`Sr3Config.{name}`, a `{section_type.__name__}`.",
        "",
        "| Key | Type | Default | Accepted | Scope | Variable | Description |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *(_row(key) for key in section_keys(name)),
    ]


def render() -> str:
    """Return the text of ``docs/configuration.md``."""
    lines = [_INTRO.rstrip("\n")]
    lines += [f"| {scope.value} | {_cell(scope.doc)} |" for scope in Scope]
    for name in SECTIONS:
        lines += _section(name)
    return "\n".join(lines) + "\n"
