"""``sr3 lab up --storm``, ``sr3 status --json`` and ``sr3 lab down`` with real Storm.

One lab with its own ZooKeeper, one ring node and a Storm cluster; a Java-only
Flux topology submitted with our launcher puts a worker JVM on it, so ``lab
down`` is shown to stop workers too (they outlive their supervisor on Storm).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from storm_bridge.apache import ApacheStormCluster, StormHome, jar_command
from tests.conftest import run_sr3

pytestmark = [pytest.mark.zk, pytest.mark.apache_storm, pytest.mark.slow]

TOPOLOGY = Path(__file__).parent / "topologies" / "java_words.yaml"


def sr3(*args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``sr3 ARGS``; check it printed no traceback."""
    return run_sr3(*args, timeout_s=timeout_s)


def processes_under(root: Path) -> list[str]:
    """Command lines of the processes whose argv or working dir is under ``root``."""
    prefix = f"{root}/"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace")
            cwd = str(Path(entry / "cwd").readlink())
        except OSError:
            continue
        if prefix in argv or f"{cwd}/".startswith(prefix):
            found.append(f"{entry.name}: {argv.replace(chr(0), ' ')[:200]}")
    return found


@pytest.fixture
def lab_dir(tmp_path: Path) -> Iterator[Path]:
    """A lab dir; whatever still runs from it at teardown is stopped."""
    root = tmp_path / "lab"
    yield root
    if processes_under(root):
        sr3("lab", "down", "--dir", str(root))


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    pairs = (item.decode(errors="replace").partition("=") for item in raw if item)
    return {key: value for key, _, value in pairs}


def test_lab_up_storm_status_and_down_leave_no_jvm_behind(
    lab_dir: Path, storm_home: StormHome, wait_until: Callable[..., Any]
) -> None:
    up = sr3(
        "lab", "up", "--dir", str(lab_dir), "--nodes", "1",
        "--storm", "--nimbus-port", "0",
    )  # fmt: skip
    assert up.returncode == 0, up.stderr
    assert "Apache Storm 2." in up.stdout and "Nimbus 127.0.0.1:" in up.stdout

    status = sr3("status", "--lab", str(lab_dir), "--json")
    assert status.returncode == 0, status.stderr
    storm = json.loads(status.stdout)["storm"]
    assert storm["leader"] is True and storm["error"] is None
    (supervisor,) = storm["supervisors"]
    assert (supervisor["slots"], supervisor["free_slots"]) == (2, 2)
    assert storm["topologies"] == []

    # a worker JVM: the supervisor starts it, so it is not the lab's direct child
    cluster = ApacheStormCluster.attach(lab_dir / "storm")
    flux = sorted(storm_home.flux.glob("*.jar"))
    core = next(j for j in flux if j.name.startswith("flux-core"))
    submit = subprocess.run(
        jar_command(
            storm_home, core, "org.apache.storm.flux.Flux", ["--remote", str(TOPOLOGY)],
            conf_file=cluster.conf_file, log_dir=lab_dir / "storm" / "logs",
            extra_jars=[j for j in flux if j != core],
        ),
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert submit.returncode == 0, submit.stdout[-3000:] + submit.stderr[-3000:]
    workers = wait_until(
        cluster.worker_pids, timeout_s=120, what="a worker JVM of java-words"
    )
    assert isinstance(workers, list)
    secret = (lab_dir / "secret").read_text().strip()
    assert _environ(workers[0]).get("SR3_NODE_SECRET") == secret

    text = sr3("status", "--lab", str(lab_dir))
    assert "topology java-words (ACTIVE)" in text.stdout, text.stdout

    down = sr3("lab", "down", "--dir", str(lab_dir))
    assert down.returncode == 0, down.stderr
    assert "did not list" not in down.stdout  # Storm was stopped, not swept up
    assert processes_under(lab_dir) == []
    assert json.loads((lab_dir / "lab.json").read_text())["storm"] is None
