"""lab.json changes only by read-modify-write of the current file, under the lock.

No process is started: these cases check what a :class:`Lab` loaded earlier
writes (the ``sr3 run`` that loaded it may last minutes) next to a change made
since by another command.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sr3.errors import ConfigError
from sr3_cli.lab import Lab


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A new lab's dir (nothing runs)."""
    Lab(root=tmp_path).save()
    Lab(root=tmp_path).add_nodes(3)
    return tmp_path


def _state(root: Path) -> dict[str, object]:
    raw: dict[str, object] = json.loads((root / "lab.json").read_text("utf-8"))
    return raw


def test_a_lab_loaded_earlier_keeps_changes_made_since(root: Path) -> None:
    earlier = Lab.load(root)
    with Lab.update(root) as lab:  # another command: ZooKeeper restarted
        lab.zk_port, lab.zk_pid = 4321, 999_999
    earlier.add_nodes(1)
    assert earlier.zk_port == 4321  # re-read before the change
    state = _state(root)
    assert (state["zk_port"], state["zk_pid"]) == (4321, 999_999)
    nodes = state["nodes"]
    assert isinstance(nodes, dict)
    assert sorted(nodes) == ["node-1", "node-2", "node-3", "node-4"]


def test_killing_nodes_writes_nothing(root: Path) -> None:
    earlier = Lab.load(root)
    with Lab.update(root) as lab:
        lab.zk_pid = 999_999
    before = (root / "lab.json").read_bytes()
    assert earlier.kill_nodes(["node-1", "node-2"]) == []  # none runs
    assert (root / "lab.json").read_bytes() == before


def test_a_copy_read_earlier_is_never_written_back(root: Path) -> None:
    earlier = Lab.load(root)
    with Lab.update(root) as lab:
        lab.zk_pid = 999_999
    with pytest.raises(ConfigError, match="refusing to overwrite"):
        earlier.save()
    assert _state(root)["zk_pid"] == 999_999


def test_sections_this_version_does_not_know_are_kept(root: Path) -> None:
    state = _state(root)
    state["storm"] = {"nimbus_pid": 7}
    (root / "lab.json").write_text(json.dumps(state), encoding="utf-8")
    with Lab.update(root) as lab:
        lab.zk_port = 2182
    assert _state(root)["storm"] == {"nimbus_pid": 7}


def test_changing_a_dir_without_a_lab_names_the_fix(tmp_path: Path) -> None:
    with (
        pytest.raises(ConfigError, match="run `sr3 lab up --dir"),
        Lab.update(tmp_path),
    ):
        pytest.fail("no lab to change")
    assert not (tmp_path / "lab.json").exists()
