"""The ring's shared secret as the command line gives it: a file or the environment.

Its own module: ``sr3 node`` reads the secret and needs nothing else of
:mod:`sr3_cli.cluster` (labs, clients of the ring).
"""

from __future__ import annotations

import os
from pathlib import Path

from sr3.errors import ConfigError

__all__ = ["MAX_SECRET_BYTES", "read_secret"]

#: Largest secret file read: a secret is one line, never a stream.
MAX_SECRET_BYTES = 4096


def read_secret(path: str | None) -> str:
    """Return the secret from ``path`` or ``SR3_NODE_SECRET``, or empty.

    Raises:
        ConfigError: the file cannot be read.
    """
    if path:
        try:
            with Path(path).open("rb") as f:  # not /dev/zero into memory
                raw = f.read(MAX_SECRET_BYTES + 1)
            if len(raw) > MAX_SECRET_BYTES:
                msg = (
                    f"secret file {path} holds more than {MAX_SECRET_BYTES} bytes; "
                    "a ring secret is one line (a lab writes 64 hex digits): give "
                    "--secret-file the ring's secret file"
                )
                raise ConfigError(msg)
            secret = raw.decode("utf-8").strip()
        except (OSError, UnicodeError) as exc:
            msg = (
                f"cannot read secret file {path}: {exc}; give --secret-file a "
                "readable UTF-8 text file holding the ring's shared secret (a lab "
                "keeps it in LAB_DIR/secret)"
            )
            raise ConfigError(msg) from exc
        if not secret:
            msg = (
                f"secret file {path} is empty; put the ring's shared secret in it "
                "(a lab keeps its own in LAB_DIR/secret)"
            )
            raise ConfigError(msg)
        return secret
    return os.environ.get("SR3_NODE_SECRET", "")
