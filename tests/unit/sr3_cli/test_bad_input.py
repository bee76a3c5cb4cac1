"""Bad command lines end in ``sr3: error: ...`` and exit 2, never in a traceback.

Each case fails before any ZooKeeper, ring node or task is contacted, so these
run the real ``main(argv)`` with no server; ``--json`` failures print an error
object on stdout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sr3.errors import ConfigError
from sr3_cli import commands
from sr3_cli.main import main
from sr3_cli.topology_cmd import parse_kill, parse_node_kill

WORDCOUNT = str(Path(__file__).resolve().parents[3] / "topologies" / "wordcount.py")
CLOSED_ZK = ["--zk", "127.0.0.1:1"]  # never reached: each case fails before


@pytest.fixture(autouse=True)
def _no_ambient_ring(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("SR3_LAB", "SR3_ZK_HOSTS", "SR3_NODE_SECRET"):
        monkeypatch.delenv(var, raising=False)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err + out
    return code, out, err


def json_error(out: str) -> dict[str, object]:
    error = json.loads(out)["error"]
    assert isinstance(error, dict)
    return error


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["snapshot", "put", "--owner", "x", "--size", "nan"], "is not a size"),
        (["snapshot", "put", "--owner", "x", "--size", "inf"], "is not a size"),
        (["snapshot", "put", "--owner", "x", "--size", "1e30"], "too large"),
        (["snapshot", "put", "--owner", "x", "--size=-5MB"], "is not a size"),
        (["snapshot", "put", "--owner", "x", "--size", "1MB", "--epochs", "0"], ">= 1"),
        (["snapshot", "put", "--owner", "x", "--size", "1MB", "--keys", "0"], ">= 1"),
        (
            ["snapshot", "put", "--owner", "x", "--size", "1MB"]
            + ["--max-chain-length", "0"],
            ">= 1",
        ),
        (
            ["snapshot", "put", "--owner", "x", "--size", "1MB"]
            + ["--update-fraction", "2"],
            "0..1",
        ),
        (["snapshot", "get", "--owner", "x", "--epoch", "0"], ">= 1"),
        (["snapshot", "get", "--owner", ""], "argument --owner: must not be empty"),
        (
            ["snapshot", "put", "--owner", "", "--size", "1MB"],
            "argument --owner: must not be empty",
        ),
        (
            ["state", "dump", "--topology", "", "--component", "c"],
            "argument --topology: must not be empty",
        ),
        (
            ["node", *CLOSED_ZK, "--data-dir", "d", "--node-id", ""],
            "argument --node-id: must not be empty",
        ),
        (
            ["snapshot", "put", "--owner", "x", "--size", "1MB"]
            + ["--seed", str(2**70)],
            "argument --seed: '1180591620717411303424' is not a whole number in",
        ),
        (["status", "--zk", "::::"], "HOST:PORT"),
        (["status", "--zk", "127.0.0.1:99999"], "HOST:PORT"),
        (["lab", "up", "--nodes", "0"], "in 1..100"),
        (["lab", "up", "--nodes", "-2"], "in 1..100"),
        (
            ["lab", "up", "--nodes", "100000"],
            "'100000' is not a whole number in 1..100",
        ),
        (["lab", "up", "--spark", "--spark-cores", "0"], ">= 1"),
        (["node", *CLOSED_ZK, "--data-dir", "d", "--port", "70000"], "TCP port"),
        (["node", *CLOSED_ZK, "--data-dir", "d", "--capacity", "0"], "in 1..100"),
        (
            ["node", *CLOSED_ZK, "--data-dir", "d", "--capacity", "1000000"],
            "argument --capacity: '1000000' is not a whole number in 1..100",
        ),
        (["run", WORDCOUNT, "--duration", "-1"], "seconds > 0"),
        (["run", WORDCOUNT, "--until-idle", "--timeout", "0"], "seconds > 0"),
        (["run", WORDCOUNT, "--until-idle", "-o", "sr3.nosuch.key=1"], "unknown sr3"),
        (
            ["run", WORDCOUNT, "--until-idle", "-o", "sr3.checkpoint.intervl.s=1"],
            "did you mean sr3.checkpoint.interval.s",
        ),
        (["run", WORDCOUNT, "--until-idle", "-o", "sr3.ring.vnodes=abc"], "vnodes"),
        (
            ["run", WORDCOUNT, "--until-idle", "-o", "sr3.ring.max.shard.bytes=12XB"],
            "is not a size",
        ),
        (
            ["run", WORDCOUNT, "--until-idle", "-o", "sr3.recovery.mechanism=bogus"],
            "star, line, tree, auto",
        ),
        (
            ["run", WORDCOUNT, "--engine", "spark", "--until-idle"]
            + ["-o", "sr3.nosuch.key=1"],
            "unknown sr3",
        ),
        (["run", WORDCOUNT, "--until-idle", "--kill", "count:0@-1"], ">= 0"),
        (["run", WORDCOUNT, "--until-idle", "--kill-node", "node-1@nan"], ">= 0"),
    ],
)
def test_bad_arguments_are_refused_before_anything_starts(
    capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 2
    assert says in err
    error = json_error(out)
    assert says in str(error["message"])
    assert error["exit_code"] == 2


@pytest.mark.parametrize("engine", ["storm", "spark"])
def test_a_topology_path_that_is_a_directory_is_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, engine: str
) -> None:
    (tmp_path / "wc.py").write_text("x = 1\n", encoding="utf-8")
    code, _, err = run_cli(
        capsys, "run", str(tmp_path), "--until-idle", "--engine", engine
    )
    assert code == 2
    assert "is a directory (it holds wc.py); give the .py file" in err


def test_a_spark_checkpoint_dir_that_is_a_file_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    file = tmp_path / "f"
    file.write_text("", encoding="utf-8")
    code, _, err = run_cli(
        capsys,
        "run",
        WORDCOUNT,
        "--engine",
        "spark",
        "--until-idle",
        "--checkpoint-dir",
        str(file),
    )
    assert code == 2
    assert f"--checkpoint-dir {file} is a file" in err


def test_a_missing_topology_file_is_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run_cli(capsys, "run", str(tmp_path / "no.py"), "--until-idle")
    assert code == 2
    assert f"topology file {tmp_path / 'no.py'} does not exist" in err


@pytest.mark.parametrize("text", ["count:0@-1", "count:0@nan", "count:0@inf"])
def test_kill_moments_must_be_finite_and_not_negative(text: str) -> None:
    with pytest.raises(ConfigError, match="SECONDS after the start"):
        parse_kill(text)
    with pytest.raises(ConfigError, match="SECONDS after the start"):
        parse_node_kill("node-1@" + text.split("@")[1])


def test_kills_must_name_their_target() -> None:
    with pytest.raises(ConfigError, match="name the component"):
        parse_kill(":0@1")
    with pytest.raises(ConfigError, match="name the node"):
        parse_node_kill("@1")


def test_usage_errors_without_json_print_usage_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run_cli(capsys, "snapshot", "get", "--owner", "x", "--mechanism")
    assert code == 2
    assert out == ""
    assert err.startswith("usage: sr3 snapshot get")


def test_an_empty_secret_file_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    empty = tmp_path / "secret"
    empty.write_text("\n", encoding="utf-8")
    for argv in (
        ["snapshot", "get", "--owner", "x", *CLOSED_ZK],
        ["node", *CLOSED_ZK, "--data-dir", str(tmp_path / "d")],
    ):
        code, _, err = run_cli(capsys, *argv, "--secret-file", str(empty))
        assert code == 2
        assert f"secret file {empty} is empty" in err


def test_a_missing_secret_file_is_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "nope"
    code, _, err = run_cli(capsys, "status", *CLOSED_ZK, "--secret-file", str(missing))
    assert code == 2
    assert f"cannot read secret file {missing}" in err


def test_a_node_data_dir_that_is_a_file_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    file = tmp_path / "f"
    file.write_text("", encoding="utf-8")
    code, _, err = run_cli(capsys, "node", *CLOSED_ZK, "--data-dir", str(file))
    assert code == 2
    assert "is a file; give the node a directory" in err


def test_lab_up_on_a_file_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    file = tmp_path / "f"
    file.write_text("", encoding="utf-8")
    code, _, err = run_cli(capsys, "lab", "up", "--dir", str(file))
    assert code == 2
    assert "is a file" in err


def test_an_unexpected_error_is_reported_without_a_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(_: object) -> int:
        msg = "a bug"
        raise TypeError(msg)

    monkeypatch.setattr(commands, "run_status", broken)
    code, out, err = run_cli(capsys, "status", *CLOSED_ZK, "--json")
    assert code == 1
    assert "internal error: TypeError: a bug" in err
    assert "--log-level DEBUG" in err
    assert json_error(out)["type"] == "TypeError"


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A process standing in for a lab's ring node."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def test_lab_kill_with_an_unknown_id_kills_nothing(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    sleeper: subprocess.Popen[bytes],
) -> None:
    node = {"node_id": "node-1", "data_dir": str(tmp_path), "pid": sleeper.pid}
    lab = {"zk_port": 1, "zk_pid": None, "nodes": {"node-1": node}}
    (tmp_path / "lab.json").write_text(json.dumps(lab), encoding="utf-8")
    code, _, err = run_cli(
        capsys, "lab", "kill", "--dir", str(tmp_path), "node-1", "node-99"
    )
    assert code == 2
    assert "no node 'node-99'" in err
    assert sleeper.poll() is None  # node-1 was not killed
    os.kill(sleeper.pid, signal.SIGKILL)  # what a correct command does
    assert sleeper.wait() == -signal.SIGKILL


def test_an_unknown_log_level_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "--log-level", "bogus", "status")
    assert code == 2
    assert "invalid choice: 'BOGUS'" in err


def test_demo_refuses_to_wipe_a_dir_that_is_not_a_demo(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    keep = tmp_path / "important.txt"
    keep.write_text("data", encoding="utf-8")
    code, _, err = run_cli(capsys, "demo", "--dir", str(tmp_path))
    assert code == 2
    assert "is not empty and not a demo lab" in err
    assert keep.read_text(encoding="utf-8") == "data"


def test_demo_checks_its_size_first(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run_cli(
        capsys, "demo", "--dir", str(tmp_path / "d"), "--size", "nan"
    )
    assert code == 2
    assert "is not a size" in err
    assert not (tmp_path / "d").exists()


def test_demo_never_takes_the_lab_of_sr3_lab(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from sr3_cli import demo  # noqa: PLC0415 - patched below

    roots: list[Path] = []

    def record(root: Path, *, size: str, default: bool) -> int:
        roots.append(root)
        return 0

    monkeypatch.setattr(demo, "run_demo", record)
    monkeypatch.setenv("SR3_LAB", str(tmp_path / "my-lab"))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert main(["demo"]) == 0
    assert roots == [tmp_path / "sr3-demo"]


def test_a_stopped_lab_says_how_to_start_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    lab = {"zk_port": 1, "zk_pid": None, "nodes": {}}
    (tmp_path / "lab.json").write_text(json.dumps(lab), encoding="utf-8")
    for argv in (
        ["status", "--json"],
        ["snapshot", "get", "--owner", "x", "--json"],
        ["state", "dump", "--topology", "t", "--component", "c", "--json"],
        ["run", WORDCOUNT, "--until-idle", "--json"],
    ):
        code, out, err = run_cli(capsys, *argv, "--lab", str(tmp_path))
        assert code == 2
        assert f"the lab in {tmp_path} is stopped" in err
        assert f"sr3 lab up --dir {tmp_path}" in json_error(out)["message"]


def test_demo_wipes_the_default_dir_an_earlier_demo_left(tmp_path: Path) -> None:
    # demos before the marker file left their lab and Spark checkpoint: `make
    # demo` run again must not refuse its own default dir
    from sr3_cli.demo import _check_wipeable  # noqa: PLC0415 - the unit tested

    for name in ("lab.json", "secret"):
        (tmp_path / name).write_text("x", encoding="utf-8")
    for name in ("zk", "nodes", "spark-checkpoint"):
        (tmp_path / name).mkdir()
    _check_wipeable(tmp_path, default=True)  # no error
    with pytest.raises(ConfigError, match="not a demo lab"):
        _check_wipeable(tmp_path, default=False)


@pytest.mark.parametrize(
    ("variable", "value", "key"),
    [
        ("SR3_ZK_SESSION_TIMEOUT_S", "1e9", "sr3.zk.session.timeout.s"),
        ("SR3_ZK_CONNECT_TIMEOUT_S", "1e12", "sr3.zk.connect.timeout.s"),
        ("SR3_NODE_IO_TIMEOUT_S", "inf", "sr3.node.io.timeout.s"),
    ],
)
def test_durations_too_long_to_wait_are_named(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    value: str,
    key: str,
) -> None:
    # ZooKeeper takes a session timeout as int32 milliseconds; waits overflow
    # time_t: each ended in a traceback or an "internal error" before
    monkeypatch.setenv(variable, value)
    code, out, err = run_cli(capsys, "status", *CLOSED_ZK, "--json")
    assert code == 2
    assert f"sr3 config {key}=" in err
    assert "<= 1000000 seconds" in str(json_error(out)["message"])


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])  # noqa: S104 - the point
def test_a_node_refuses_a_wildcard_host_it_would_announce(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, host: str
) -> None:
    # other machines would dial 0.0.0.0, i.e. themselves
    data_dir = tmp_path / "n"
    code, _, err = run_cli(
        capsys, "node", *CLOSED_ZK, "--data-dir", str(data_dir), "--host", host
    )
    assert code == 2
    assert f"--host {host} binds every interface but is no address" in err
    assert not data_dir.exists()
