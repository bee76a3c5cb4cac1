"""The before/after benchmark's noise verdict and its option adapter."""

from __future__ import annotations

from bench.before_after_runs import adapt
from bench.before_after_verdicts import verdict


def test_a_change_inside_the_repeats_spread_is_noise() -> None:
    got = verdict([1.0, 1.2], [1.15, 1.25], "lower")

    assert got["verdict"] == "within noise"
    assert round(got["ratio"], 3) == round(1.2 / 1.1, 3)


def test_a_change_beyond_the_spread_says_which_way() -> None:
    assert verdict([1.0, 1.02], [1.5, 1.52], "lower")["verdict"] == (
        "worse beyond noise"
    )
    assert verdict([1.0, 1.02], [1.5, 1.52], "higher")["verdict"] == (
        "better beyond noise"
    )
    assert verdict([1.0, 1.02], [1.5, 1.52], "")["verdict"] == "changed beyond noise"


def test_one_repeat_gives_no_verdict() -> None:
    assert verdict([1.0], [3.0], "lower")["verdict"] == "no verdict (1 repeat)"


def test_options_a_revision_does_not_know_are_dropped_with_their_values() -> None:
    kept, dropped = adapt(
        ("--lines", "5000", "--json", "--new", "7", "--repeats", "1"),
        {"--lines", "--json", "--repeats"},
    )

    assert kept == ["--lines", "5000", "--json", "--repeats", "1"]
    assert dropped == ["--new"]
