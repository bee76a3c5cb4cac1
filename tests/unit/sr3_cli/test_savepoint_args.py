"""``sr3 savepoint TOPOLOGY [--name NAME]`` is ``sr3 savepoint create``."""

from __future__ import annotations

import pytest

from sr3_cli.args.savepoint import shorthand
from sr3_cli.main import build_parser


@pytest.mark.parametrize(
    ("words", "topology", "name"),
    [
        (["savepoint", "wc", "--name", "v1"], "wc", "v1"),
        (["savepoint", "wc"], "wc", None),
        (["--log-level", "DEBUG", "savepoint", "wc", "--lab", "lab"], "wc", None),
        (["savepoint", "create", "wc", "--name", "v2"], "wc", "v2"),
    ],
)
def test_a_savepoint_without_a_sub_command_creates_one(
    words: list[str], topology: str, name: str | None
) -> None:
    args = build_parser().parse_args(shorthand(words))
    assert args.savepoint_command == "create"
    assert (args.topology, args.name) == (topology, name)


@pytest.mark.parametrize(
    "words",
    [
        ["savepoint", "list", "wc"],
        ["savepoint", "delete", "wc", "v1"],
        ["savepoint", "--help"],
        ["run", "savepoint"],
        ["--log-level", "savepoint", "status"],
    ],
)
def test_sub_commands_and_other_commands_are_left_alone(words: list[str]) -> None:
    assert shorthand(words) == words
