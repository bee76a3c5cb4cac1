"""A package's names loaded on first use (PEP 562), for every package that does so.

A package keeps a table of its exports, each with the module that defines it,
and sets ``__getattr__ = lazy_exports(__name__, table)``: ``from pkg import
Name`` then imports only ``Name``'s module, the first time, and the value is
kept on the package. Processes that need a light part of a package (a spout
task, a ring node, ``sr3 state dump``) never import the rest.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """Return the module ``__getattr__`` of ``package`` for ``exports``.

    Args:
        package: The package's ``__name__``.
        exports: ``{name: module that defines it}``.
    """

    def __getattr__(name: str) -> Any:  # noqa: N807 (the PEP 562 hook)
        module = exports.get(name)
        if module is None:
            msg = f"module {package!r} has no attribute {name!r}"
            raise AttributeError(msg)
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # later reads skip the hook
        return value

    return __getattr__
