"""A lab dir whose ``lab.json`` is missing, corrupt or truncated is named, not used.

Nothing is overwritten: ``sr3 lab up`` refuses a corrupt ``lab.json`` (its pids
may be the only record of running processes).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sr3_cli.lab import Lab
from sr3_cli.main import main

VALID = {
    "zk_port": 2181,
    "zk_pid": None,
    "chroot": "/sr3/default",
    "nodes": {"node-1": {"node_id": "node-1", "data_dir": "/tmp/x", "pid": None}},
    "spark": None,
}
CORRUPT = {
    "truncated": json.dumps(VALID)[:40],
    "empty": "",
    "empty object": "{}",
    "a list": "[1, 2]",
    "port not a number": json.dumps({**VALID, "zk_port": "abc"}),
    "port out of range": json.dumps({**VALID, "zk_port": 70000}),
    "pid not a number": json.dumps({**VALID, "zk_pid": "x"}),
    "node not an object": json.dumps({**VALID, "nodes": {"node-1": 3}}),
    "node with unknown field": json.dumps(
        {**VALID, "nodes": {"node-1": {**VALID["nodes"]["node-1"], "bogus": 1}}}  # type: ignore[index, dict-item]  # literal above
    ),
    "nodes not an object": json.dumps({**VALID, "nodes": []}),
    "external zookeeper not a string": json.dumps({**VALID, "zk_external": 2181}),
    "external zookeeper with a bad port": json.dumps(
        {**VALID, "zk_external": "zk1:99999"}
    ),
}


@pytest.fixture(autouse=True)
def _no_ambient_lab(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SR3_LAB", raising=False)


def _lab(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "lab.json"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize("text", list(CORRUPT.values()), ids=list(CORRUPT))
@pytest.mark.parametrize(
    "argv",
    [
        ["status", "--lab", "{dir}"],
        ["status", "--json", "--lab", "{dir}"],
        ["snapshot", "get", "--owner", "x", "--lab", "{dir}"],
        ["state", "dump", "--topology", "t", "--component", "c", "--lab", "{dir}"],
        ["lab", "down", "--dir", "{dir}"],
        ["lab", "kill", "node-1", "--dir", "{dir}"],
        ["lab", "restart", "node-1", "--dir", "{dir}"],
        ["lab", "up", "--dir", "{dir}"],
    ],
    ids=["status", "status-json", "get", "dump", "down", "kill", "restart", "up"],
)
def test_a_corrupt_lab_json_is_named_and_kept(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, argv: list[str]
) -> None:
    root = _lab(tmp_path, text)
    code = main([a.format(dir=root) for a in argv])
    out, err = capsys.readouterr()
    assert code == 2
    assert "Traceback" not in err
    assert f"the lab's state file {root / 'lab.json'} cannot be read" in err
    assert f"run `sr3 lab up --dir {root}`" in err
    if "--json" in argv:
        assert "cannot be read" in json.loads(out)["error"]["message"]
    assert (root / "lab.json").read_text(encoding="utf-8") == text  # not rewritten


def test_a_binary_lab_json_is_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    root = _lab(tmp_path, b"\xff\xfe\x00")
    assert main(["status", "--lab", str(root)]) == 2
    assert "cannot be read (UnicodeDecodeError" in capsys.readouterr().err


def test_a_lab_json_that_is_a_directory_is_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "lab.json").mkdir()
    assert main(["lab", "up", "--dir", str(tmp_path)]) == 2
    assert "cannot be read (IsADirectoryError" in capsys.readouterr().err


@pytest.mark.parametrize("how", ["--lab", "SR3_LAB"])
def test_no_lab_says_how_to_start_one(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    how: str,
) -> None:
    where = tmp_path / "garbage"
    argv = ["status", "--json"]
    if how == "SR3_LAB":
        monkeypatch.setenv("SR3_LAB", str(where))
    else:
        argv += ["--lab", str(where)]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert f"no lab in {where}: run `sr3 lab up --dir {where}` first" in err
    assert json.loads(out)["error"]["type"] == "ConfigError"


def test_lab_down_on_a_dir_never_up_creates_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    never = tmp_path / "never"
    assert main(["lab", "down", "--dir", str(never)]) == 2
    assert "no lab in" in capsys.readouterr().err
    assert not never.exists()


def test_an_external_zookeeper_is_kept_across_loads(tmp_path: Path) -> None:
    lab = Lab(root=tmp_path)
    lab.save()
    lab.use_zookeeper("zk1:2181,zk2:2181")
    again = Lab.load(tmp_path)
    assert again.zk_external == "zk1:2181,zk2:2181"
    assert again.zk_hosts == "zk1:2181,zk2:2181"
    assert again.zookeeper_running  # the lab neither starts nor stops it
    assert again.chroot.startswith("/sr3/lab-")
    other = Lab(root=tmp_path / "other")
    other.root.mkdir()
    other.save()
    other.use_zookeeper("zk1:2181,zk2:2181")
    assert other.chroot.startswith("/sr3/lab-")
    assert other.chroot != again.chroot  # two labs on one ZooKeeper never meet
    again.use_zookeeper("zk1:2181,zk2:2181")  # the same again: nothing changes
    assert Lab.load(tmp_path).chroot == again.chroot
    with pytest.raises(ValueError, match="already uses the ZooKeeper at zk1:2181"):
        again.use_zookeeper("zk3:2181")
    again.stop_zookeeper()  # left running: nothing to signal, nothing recorded
    assert Lab.load(tmp_path).zk_external == "zk1:2181,zk2:2181"
