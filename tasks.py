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

from storm_bridge.messages import GENERATION_FIELD_KEY as FIELD_KEY
from storm_bridge.native import MODE_KEY, NATIVE

#: ``config.json`` env key and value that turn the hook on.
VIRTUALENV_KEY = "sr3_virtualenv"
SUBMITTER = "submitter"
E_NO_ZK = (
    "sr3.checkpoint.mode=native needs sr3.zk.hosts (the ring's ZooKeeper), and "
    "neither the topology conf nor Nimbus's storm.yaml at {nimbus} sets it: add "
    '"sr3.zk.hosts": "HOST:PORT" to the options of env {env!r} in config.json, '
    "or pass -o sr3.zk.hosts=HOST:PORT"
)


def _cluster_setting(
    env_config: dict[str, Any], options: dict[str, Any], key: str
) -> Any:
    """Return ``key`` as the workers will see it: the options', else storm.yaml's."""
    if key in options:
        return options[key]
    from streamparse.util import get_nimbus_config  # noqa: PLC0415 (only when asked)

    # one Thrift call per Nimbus and process: streamparse caches the conf
    return get_nimbus_config(env_config).get(key)


def _adopt_cluster_mode(env_config: dict[str, Any], options: dict[str, Any]) -> None:
    """Copy a native mode set only in Nimbus's storm.yaml into the options.

    The workers run that mode either way; with it in the options the hook
    fences the generations the mode needs, as for ``-o sr3.checkpoint.mode``.
    """
    if _cluster_setting(env_config, options, MODE_KEY) != NATIVE:
        return
    options.setdefault(MODE_KEY, NATIVE)
    if FIELD_KEY not in options:
        field = _cluster_setting(env_config, options, FIELD_KEY)
        if field is not None:
            options[FIELD_KEY] = field


def _check_ring(
    env_name: str, env_config: dict[str, Any], options: dict[str, Any]
) -> None:
    """Refuse a native-mode submit whose workers could not reach the ring."""
    if options.get(MODE_KEY) != NATIVE:
        return
    if not _cluster_setting(env_config, options, "sr3.zk.hosts"):
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

    The checkpoint mode and ``sr3.storm.generation.field`` are the submit
    options', else those of Nimbus's storm.yaml (what the workers get). Also
    refuses a ``sr3.checkpoint.mode=native`` topology whose workers would get
    no ``sr3.zk.hosts``: their state would silently stay in memory.

    Also refuses a bolt whose task count is fixed (``KafkaSink``) at another
    count than the committed epoch its tasks would start from.

    Raises:
        FileNotFoundError: this virtualenv has no ``streamparse_run``.
        ValueError: native mode without ``sr3.zk.hosts``.
        ConfigError: a fixed-count bolt at another count than committed.
        SubmitError: native mode and this virtualenv has no ``sr3_component_run``.
    """
    from storm_bridge.sparse.hook import fence_sparse_submit  # noqa: PLC0415

    _adopt_cluster_mode(env_config, options)
    _check_ring(env_name, env_config, options)
    _check_fixed_counts(topology_name, env_name, env_config, options)
    local = env_config.get(VIRTUALENV_KEY) == SUBMITTER
    if local:
        _run_from_submitter(topology_name, env_name, options)
    fenced = fence_sparse_submit(topology_name, options, local=local)
    if fenced:
        print(f"{topology_name}: generation field on {', '.join(sorted(fenced))}")


def _check_fixed_counts(
    topology_name: str,
    env_name: str,
    env_config: dict[str, Any],
    options: dict[str, Any],
) -> None:
    """Refuse a fixed-count bolt (``KafkaSink``) at another count than committed."""
    from storm_bridge.sparse.hook import (  # noqa: PLC0415 (loaded when sparse submit calls)
        check_fixed_counts,
        fixed_components,
        submitted_topology,
    )

    fixed = fixed_components(submitted_topology(), env_name)
    if not fixed:
        return
    keys = ("sr3.zk.hosts", "sr3.zk.chroot")
    conf = {k: v for k in keys if (v := _cluster_setting(env_config, options, k))}
    check_fixed_counts(topology_name, conf, fixed)


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
