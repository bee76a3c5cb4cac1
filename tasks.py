"""streamparse's project hooks: ``sparse submit`` imports ``pre_submit`` from here.

An env of ``config.json`` with ``"sr3_virtualenv": "submitter"`` (the ``lab``
env) has workers on this machine: they run ``streamparse_run`` from the
virtualenv that runs ``sparse submit`` (this project's ``.venv``, where the
project is installed) instead of ``virtualenv_root/<topology>/``, which
streamparse would create over SSH. Nothing else changes in streamparse's path.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

#: ``config.json`` env key and value that turn the hook on.
VIRTUALENV_KEY = "sr3_virtualenv"
SUBMITTER = "submitter"


def pre_submit(
    topology_name: str,
    env_name: str,
    env_config: dict[str, Any],
    options: dict[str, Any],
) -> None:
    """Point the workers of a ``submitter`` env at this virtualenv's ``bin/``.

    streamparse builds each component's command as
    ``virtualenv_root/virtualenv_name/bin/streamparse_run`` right after this
    hook, from fabric's ``env.virtualenv_root`` and ``options["virtualenv_name"]``.

    Raises:
        FileNotFoundError: this virtualenv has no ``streamparse_run``.
    """
    if env_config.get(VIRTUALENV_KEY) != SUBMITTER:
        return
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
