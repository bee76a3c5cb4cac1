"""The Vagrant lab's provisioning scripts, run for a host of the netns lab.

``vagrant/provision/*.sh`` install each daemon of a VM as a systemd service
whose start is a wrapper script (``$SR3_ETC/run/NAME``). With
``SR3_NO_SYSTEMD=1`` they only write that wrapper, and the one-machine netns
lab (``sr3 lab up --netns``) starts its ring nodes (``node.sh``) and Spark
daemons (``spark.sh``) through it, in the daemon's host's namespace: the same
script provisions a daemon on a VM and on a netns host, so the suite exercises
it (vagrant/README.md). Each provisioned
daemon gets its own ``etc`` and ``var`` under the lab dir's ``provision/``;
its ``etc/secret`` is a link to the lab's secret.
"""

from __future__ import annotations

import getpass
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from sr3.errors import ConfigError

__all__ = ["PROVISION_DIR", "provision"]

#: Where the provisioning scripts are in a checkout of the repository.
PROVISION_DIR: Final = Path(__file__).resolve().parents[1] / "vagrant" / "provision"
_TIMEOUT_S: Final = 60.0


def provision(
    script: str,
    root: Path,
    *,
    secret_file: Path,
    env: Mapping[str, str],
    service: str,
    args: tuple[str, ...] = (),
) -> Path:
    """Run ``vagrant/provision/SCRIPT`` without systemd; return the wrapper it wrote.

    ``root`` holds the daemon's ``etc`` (its env file, the link to
    ``secret_file`` and the wrapper under ``run/``) and ``var``; ``env`` are
    the script's own settings (``SR3_HOST_IP``, ``SR3_ZK``...). The wrapper,
    ``etc/run/SERVICE``, execs the daemon, so its pid is the daemon's.

    Raises:
        ConfigError: the scripts are not here (not a checkout of the
            repository) or the script failed (its output is quoted).
    """
    path = PROVISION_DIR / script
    if not path.is_file():
        msg = (
            f"the netns lab starts its ring nodes and Spark daemons through {path}, "
            "which is not "
            "here: run `sr3 lab up --netns` from a checkout of the repository"
        )
        raise ConfigError(msg)
    etc = root / "etc"
    (etc / "run").mkdir(parents=True, exist_ok=True)
    (etc / "env").touch()
    link = etc / "secret"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(secret_file.resolve())
    full_env = {
        **os.environ,
        **env,
        "SR3_SRC": str(PROVISION_DIR.parents[1]),
        "SR3_VENV": sys.prefix,
        "SR3_ETC": str(etc),
        "SR3_VAR": str(root / "var"),
        "SR3_USER": getpass.getuser(),
        "SR3_NO_SYSTEMD": "1",
    }
    try:
        result = subprocess.run(  # noqa: S603 (our script, our arguments)
            ["bash", str(path), *args],  # noqa: S607 (bash from PATH, as Vagrant runs it)
            env=full_env,
            capture_output=True,
            text=True,
            timeout=_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        msg = f"provisioning script {path} did not run: {exc}"
        raise ConfigError(msg) from exc
    if result.returncode != 0:
        output = (result.stdout + result.stderr).strip()[-2000:]
        msg = f"provisioning script {path} failed ({result.returncode}):\n{output}"
        raise ConfigError(msg)
    wrapper = etc / "run" / service
    if not os.access(wrapper, os.X_OK):
        msg = f"provisioning script {path} wrote no runnable {wrapper}"
        raise ConfigError(msg)
    return wrapper
