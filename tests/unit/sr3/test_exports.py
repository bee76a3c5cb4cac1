"""A package's exports load their module on first read, once."""

from __future__ import annotations

import sys
import types

import pytest

from sr3.exports import lazy_exports


def test_an_export_loads_its_module_on_first_read_and_stays() -> None:
    package = types.ModuleType("sr3_fake_pkg")
    package.__getattr__ = lazy_exports(  # type: ignore[method-assign]
        "sr3_fake_pkg", {"dedent": "textwrap", "missing": "textwrap"}
    )
    sys.modules["sr3_fake_pkg"] = package
    try:
        import textwrap  # noqa: PLC0415 (the module the export names)

        assert "dedent" not in vars(package)
        assert package.dedent is textwrap.dedent
        assert vars(package)["dedent"] is textwrap.dedent  # kept: no hook again
        with pytest.raises(AttributeError, match="'sr3_fake_pkg' has no attribute"):
            _ = package.nosuch
        with pytest.raises(AttributeError, match="has no attribute 'missing'"):
            _ = package.missing  # the module lacks it: the module's own error
    finally:
        del sys.modules["sr3_fake_pkg"]
