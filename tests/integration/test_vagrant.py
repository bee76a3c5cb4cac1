"""The multi-host Vagrant lab (``vagrant/``), checked without booting a VM.

No hypervisor and no boxes exist on CI or dev machines, so the Vagrantfile is
checked with ``vagrant validate`` (offline, with Debian's ``vagrant-libvirt``
plugin, so the libvirt provider block is checked too) and every shell script
under ``vagrant/`` and ``scripts/`` with ``shellcheck``. Each check is shown to
refuse a broken input, so it can fail.

The provisioning scripts' project-facing parts run for real on loopback: with
``SR3_NO_SYSTEMD=1`` they write their configs and service wrappers into a temp
dir instead of ``/etc``, and the test starts those wrappers (ZooKeeper through
Debian's zkServer.sh, Storm Nimbus and a supervisor, a ring node) and checks
that they find each other. Missing tools fail the test, naming the package.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from sr3.net import free_port
from storm_bridge.apache.nimbus import NimbusClient, NimbusUnreachableError

REPO = Path(__file__).resolve().parents[2]
VAGRANT_DIR = REPO / "vagrant"
PROVISION = VAGRANT_DIR / "provision"
E_MISSING = (
    "{tool} not found: install Debian's {package} package with `make setup` "
    "(scripts/bootstrap.sh does it) or `apt-get install {package}`"
)


def _tool(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(E_MISSING.format(tool=tool, package=package))
    return path


def _validate(vagrant_dir: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run ``vagrant validate`` in ``vagrant_dir``, offline, writing only to tmp."""
    vagrant = _tool("vagrant", "vagrant")
    env = {
        **os.environ,
        "VAGRANT_CHECKPOINT_DISABLE": "1",
        "VAGRANT_DEFAULT_PROVIDER": "libvirt",
        "VAGRANT_DOTFILE_PATH": str(tmp_path / "dotfile"),
    }
    return subprocess.run(
        [vagrant, "validate"],
        cwd=vagrant_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _copy_lab(tmp_path: Path) -> Path:
    copy = tmp_path / "vagrant"
    shutil.copytree(VAGRANT_DIR, copy, ignore=shutil.ignore_patterns(".*"))
    return copy


@pytest.mark.slow
def test_the_vagrantfile_validates_offline(tmp_path: Path) -> None:
    secret = VAGRANT_DIR / ".lab" / "secret"
    had_secret = secret.exists()  # made by a human's `vagrant up`, if any
    result = _validate(VAGRANT_DIR, tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "validated successfully" in output
    assert secret.exists() == had_secret, "validate must not make the ring secret"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param("Vagrant.configure(", "Vagrant.configure((", "syntax", id="ruby"),
        pytest.param(
            "lv.cpus = host[:cpus]",
            "lv.cpu_count = host[:cpus]",
            "cpu_count",
            id="libvirt-setting",
        ),
        pytest.param(
            'path: "provision/#{script}"',
            'path: "provision/missing-#{script}"',
            "missing-",
            id="script-path",
        ),
    ],
)
def test_a_broken_vagrantfile_is_refused(
    tmp_path: Path, old: str, new: str, expected: str
) -> None:
    copy = _copy_lab(tmp_path)
    vagrantfile = copy / "Vagrantfile"
    text = vagrantfile.read_text(encoding="utf-8")
    assert old in text
    vagrantfile.write_text(text.replace(old, new, 1), encoding="utf-8")
    result = _validate(copy, tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert expected in output.lower()


def _scripts() -> list[Path]:
    return sorted([*VAGRANT_DIR.rglob("*.sh"), *(REPO / "scripts").rglob("*.sh")])


def test_every_lab_and_setup_script_passes_shellcheck() -> None:
    shellcheck = _tool("shellcheck", "shellcheck")
    scripts = _scripts()
    names = {p.name for p in scripts}
    assert {"common.sh", "shared.sh", "storm.sh", "node.sh", "bootstrap.sh"} <= names
    result = subprocess.run(
        [shellcheck, "--external-sources", *map(str, scripts)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_shellcheck_flags_a_broken_script(tmp_path: Path) -> None:
    shellcheck = _tool("shellcheck", "shellcheck")
    script = tmp_path / "broken.sh"
    script.write_text("#!/usr/bin/env bash\ndir=$1\nrm -rf $dir/*\n", encoding="utf-8")
    result = subprocess.run(
        [shellcheck, str(script)], capture_output=True, text=True, check=False
    )
    assert result.returncode != 0
    assert "SC2086" in result.stdout


# --- the provisioning scripts on loopback -----------------------------------------


class _Host:
    """One "VM" of the lab on loopback: its own /etc/sr3 and /var/lib/sr3 in tmp."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root
        self.etc = root / "etc"
        self.env = {
            **os.environ,
            **env,
            "SR3_ETC": str(self.etc),
            "SR3_VAR": str(root / "var"),
            "SR3_NO_SYSTEMD": "1",
            "SR3_USER": pwd.getpwuid(os.getuid()).pw_name,
        }
        self.etc.mkdir(parents=True)
        (self.etc / "env").write_text("", encoding="utf-8")
        (self.etc / "secret").write_text("vagrant-test-secret", encoding="utf-8")
        self.procs: list[subprocess.Popen[bytes]] = []

    def provision(self, script: str, *args: str) -> None:
        """Run ``script`` as Vagrant does: a lone copy, the repository in SR3_SRC."""
        upload = self.root / "vagrant-shell"
        shutil.copyfile(PROVISION / script, upload)
        result = subprocess.run(
            ["bash", str(upload), *args],
            env={**self.env, "SR3_SRC": str(REPO)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr

    def start(self, service: str) -> None:
        """Start the wrapper the script wrote, as systemd would (own session)."""
        log = (self.root / f"{service}.out").open("wb")
        proc = subprocess.Popen(
            [str(self.etc / "run" / service)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.root,
            env=self.env,
            start_new_session=True,
        )
        log.close()
        self.procs.append(proc)

    def tails(self) -> str:
        parts = []
        for out in sorted(self.root.glob("*.out")):
            lines = out.read_text(encoding="utf-8", errors="replace").splitlines()
            parts.append(f"--- {out} ---\n" + "\n".join(lines[-15:]))
        return "\n".join(parts)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[dict[str, _Host]]:
    zk_port = free_port()
    common = {
        "SR3_HOST_IP": "127.0.0.1",
        "SR3_ZK": f"127.0.0.1:{zk_port}",
        "SR3_ZK_PORT": str(zk_port),
        "SR3_NIMBUS": "127.0.0.1",
        "SR3_NIMBUS_PORT": str(free_port()),
        "SR3_SUPERVISOR_PORT": str(free_port()),
        "SR3_STORM_SLOTS": "1",
        "SR3_STORM_SLOT_BASE": str(free_port()),
        "SR3_STORM_HEAP_MB": "256",
        "SR3_NODE_PORT": str(free_port()),
        "SR3_SPARK_MASTER": "spark://127.0.0.1:7077",
    }
    made = {name: _Host(tmp_path / name, common) for name in ("zk", "nimbus", "worker")}
    try:
        yield made
    finally:
        for host in made.values():
            host.stop()


def _wait(
    what: str, ready: Callable[[], bool], hosts: dict[str, _Host], timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.5)  # polling a daemon of the loopback run; bounded by deadline
    tails = "\n".join(h.tails() for h in hosts.values())
    pytest.fail(f"{what} within {timeout_s} s\n{tails}")


@pytest.mark.slow
@pytest.mark.apache_storm
def test_the_provisioned_services_find_each_other_on_loopback(
    hosts: dict[str, _Host],
) -> None:
    zk, nimbus, worker = hosts["zk"], hosts["nimbus"], hosts["worker"]
    zk.provision("zookeeper.sh")
    nimbus.provision("storm.sh", "nimbus")
    nimbus.provision("spark.sh", "master")
    worker.provision("storm.sh", "supervisor")
    worker.provision("spark.sh", "worker")
    worker.provision("node.sh")

    storm_yaml = (worker.etc / "storm" / "storm.yaml").read_text(encoding="utf-8")
    assert 'nimbus.seeds: ["127.0.0.1"]' in storm_yaml
    assert f'sr3.zk.hosts: "{zk.env["SR3_ZK"]}"' in storm_yaml
    master = (nimbus.etc / "run" / "spark-master").read_text(encoding="utf-8")
    assert "org.apache.spark.deploy.master.Master" in master
    assert f"PYSPARK_PYTHON={REPO}/.venv/bin/python" in master

    zk_hosts = zk.env["SR3_ZK"]
    zk.start("zookeeper")
    client = KazooClient(hosts=zk_hosts, timeout=5)
    client.start(timeout=60)
    try:
        nimbus.start("storm-nimbus")
        worker.start("storm-supervisor")
        worker.start("node")
        port = int(nimbus.env["SR3_NIMBUS_PORT"])
        nimbus_client = NimbusClient("127.0.0.1", port, timeout_s=5)

        def supervisor_listed() -> bool:
            try:
                summary = nimbus_client.cluster_summary()
            except NimbusUnreachableError:
                return False
            return summary.leader is not None and len(summary.supervisors) == 1

        def node_registered() -> bool:
            path = "/sr3/default/members"
            return bool(client.exists(path) and client.get_children(path))

        _wait("Nimbus did not list the supervisor", supervisor_listed, hosts, 180)
        _wait("the ring node did not register", node_registered, hosts, 60)
        assert client.exists("/storm")
    finally:
        client.stop()
        client.close()
