"""streamparse's project hooks: ``sparse submit`` imports ``pre_submit`` from here.

An env of ``config.json`` with ``"sr3_virtualenv": "submitter"`` (the ``lab``
env) has workers on this machine: they run ``streamparse_run`` from the
virtualenv that runs ``sparse submit`` (this project's ``.venv``, where the
project is installed) instead of ``virtualenv_root/<topology>/``, which
streamparse would create over SSH.

In native checkpoint mode the topology's Python components carry the rollback
generation in a hidden tuple field (:mod:`storm_bridge.sparse.hook`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

#: ``config.json`` env key and value that turn the hook on.
VIRTUALENV_KEY = "sr3_virtualenv"
SUBMITTER = "submitter"
E_NO_ZK = (
    "sr3.checkpoint.mode=native needs sr3.zk.hosts (the ring's ZooKeeper), and "
    "neither the topology conf nor Nimbus's storm.yaml at {nimbus} sets it: add "
    '"sr3.zk.hosts": "HOST:PORT" to the options of env {env!r} in config.json, '
    "or pass -o sr3.zk.hosts=HOST:PORT"
)


def _check_ring(
    env_name: str, env_config: dict[str, Any], options: dict[str, Any]
) -> None:
    """Refuse a native-mode submit whose workers could not reach the ring."""
    if options.get("sr3.checkpoint.mode") != "native":
        return
    hosts = options.get("sr3.zk.hosts")
    if hosts is None:
        from streamparse.util import get_nimbus_config  # noqa: PLC0415

        hosts = get_nimbus_config(env_config).get("sr3.zk.hosts")
    if not hosts:
        raise ValueError(E_NO_ZK.format(nimbus=env_config.get("nimbus"), env=env_name))


def pre_submit(
    topology_name: str,
    env_name: str,
    env_config: dict[str, Any],
    options: dict[str, Any],
) -> None:
    """Fence generations in native mode; point a ``submitter`` env's workers here.

    streamparse builds each component's command as
    ``virtualenv_root/virtualenv_name/bin/streamparse_run`` right after this
    hook, from fabric's ``env.virtualenv_root`` and ``options["virtualenv_name"]``.

    Also refuses a ``sr3.checkpoint.mode=native`` topology whose workers would
    get no ``sr3.zk.hosts``: their state would silently stay in memory.

    Raises:
        FileNotFoundError: this virtualenv has no ``streamparse_run``.
        ValueError: native mode without ``sr3.zk.hosts``.
        SubmitError: native mode and this virtualenv has no ``sr3_component_run``.
    """
    from storm_bridge.sparse.hook import fence_sparse_submit  # noqa: PLC0415

    _check_ring(env_name, env_config, options)
    local = env_config.get(VIRTUALENV_KEY) == SUBMITTER
    if local:
        _run_from_submitter(topology_name, env_name, options)
    fenced = fence_sparse_submit(topology_name, options, local=local)
    if fenced:
        print(f"{topology_name}: generation field on {', '.join(sorted(fenced))}")


def _run_from_submitter(
    topology_name: str, env_name: str, options: dict[str, Any]
) -> None:
    # streamparse keeps its settings in fabric 1's global env (untyped)
    from fabric.api import env  # type: ignore[import-untyped]  # noqa: PLC0415

    venv = Path(sys.prefix)
    run = venv / "bin" / "streamparse_run"
    if not run.is_file():
        msg = (
            f"env {env_name!r} runs workers from the submitting virtualenv, but "
            f"{run} does not exist; run `sparse submit` from the project's "
            "virtualenv (source .venv/bin/activate)"
        )
        raise FileNotFoundError(msg)
    env.virtualenv_root = str(venv.parent)
    options["virtualenv_name"] = venv.name
    options["topology.python.path"] = str(venv / "bin" / "python")
    print(f"{topology_name}: workers run {run} (config.json env {env_name!r})")
