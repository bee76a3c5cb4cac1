"""``sr3 compare`` on word count: the report is the raw results, and it renders.

One comparison runs per module (Storm engine, then Spark on the suite's shared
session, in one lab); the tests read its results, its report and a screenshot
of the page in headless Chromium with networking off.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from matplotlib import image
from pyspark.sql import SparkSession

from sr3_cli import compare
from sr3_cli.compare import CompareRequest, compare_engines, verdict
from sr3_cli.compare_plots import PLOT_H, PLOT_W, PLOTS
from sr3_cli.compare_report import HEADER_PX, write_report
from sr3_cli.main import main
from storm_bridge.runner import TaskKill
from tests.integration.conftest import running_lab
from topology_api.topology import load_topology

pytestmark = pytest.mark.spark

WORDCOUNT = Path(__file__).resolve().parents[3] / "topologies" / "wordcount.py"
LINES = 200
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e-?\d+)?(?![\w.])")
CHROMIUM = "/usr/bin/chromium"


def true_counts(lines: int) -> dict[str, dict[str, int]]:
    module = sys.modules[load_topology(WORDCOUNT).topology_class.__module__]
    words = Counter(w for line in module.corpus(lines, 8, 7) for w in line.split())
    return {json.dumps([word]): {"n": n} for word, n in sorted(words.items())}


@pytest.fixture(scope="module")
def compared(
    tmp_path_factory: pytest.TempPathFactory, spark: SparkSession
) -> Iterator[tuple[Path, dict[str, Any], Path]]:
    """Compare word count of 200 lines on storm (a count task killed) and spark.

    Yields the report dir, the results and the lab's root.
    """
    root = tmp_path_factory.mktemp("compare")
    request = CompareRequest(
        file=WORDCOUNT,
        engines=("storm", "spark"),
        kills=(TaskKill("count", 0, 0.3),),  # Storm engine only
        conf={"wordcount.lines": LINES},
        max_rows_per_batch=LINES,  # one micro-batch: the cheapest Spark run
    )
    with running_lab(root / "lab") as lab:
        results = compare_engines(request, lab, spark=spark, progress=lambda _: None)
        out = root / "out"
        write_report(results, out)
        yield out, results, lab.root


def _numbers(text: str) -> list[float]:
    return [float(n) for n in NUMBER.findall(text)]


def test_every_number_in_the_report_is_one_of_the_raw_results(
    compared: tuple[Path, dict[str, Any], Path],
) -> None:
    out, _, _ = compared
    raw = json.loads((out / "results.json").read_text(encoding="utf-8"))
    md = (out / "report.md").read_text(encoding="utf-8")

    assert raw["agree"] is True
    assert [r["cause"] for r in raw["runs"]["storm"]["report"]["recoveries"]] == [
        "count:0"
    ]
    assert "**AGREE**" in md
    for engine in ("storm", "spark"):
        assert raw["runs"][engine]["state"]["count"]["rows"] == true_counts(LINES)
    known = set(_numbers((out / "results.json").read_text(encoding="utf-8")))
    untraced = [n for n in _numbers(md) if n not in known]
    assert untraced == []
    # and each figure is the one of its engine, not just any raw number
    figures = {
        cells[0]: cells[1:]
        for line in md.splitlines()
        if line.startswith("| ")
        and len(cells := [c.strip() for c in line.strip("|").split("|")]) == 3
    }
    for i, engine in enumerate(raw["engines"]):
        run = raw["runs"][engine]
        assert figures["spout tuples"][i] == str(
            run["report"]["throughput"]["spout_tuples"]
        )
        assert figures["state count: keys"][i] == str(
            len(run["state"]["count"]["rows"])
        )
        assert figures["wall time of the run, s"][i] == str(run["wall_s"])
        cps = run["report"]["checkpoints"]
        assert figures["checkpoints committed"][i] == str(cps["count"])
    # the Storm engine's spouts replay what the rollback undid: more than the input
    storm_spouts, spark_spouts = (int(n) for n in figures["spout tuples"])
    assert (storm_spouts >= LINES, spark_spouts) == (True, LINES)


def test_a_state_difference_fails_the_verdict_naming_the_first_key(
    compared: tuple[Path, dict[str, Any], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, results, lab_root = compared
    tampered = copy.deepcopy(results)
    rows = tampered["runs"]["spark"]["state"]["count"]["rows"]
    first, second = sorted(rows)[2:4]
    rows[first] = {"n": rows[first]["n"] + 1}
    del rows[second]
    tampered.update(verdict(tampered))

    assert tampered["agree"] is False
    diff = tampered["differences"][0]
    assert (diff["what"], diff["component"], diff["differing"]) == ("state", "count", 2)
    assert diff["first_keys"][0]["key"] == first
    assert diff["first_keys"][1] == {
        "key": second,
        "storm": results["runs"]["storm"]["state"]["count"]["rows"][second],
        "spark": None,
    }

    # the command exits 1 and says so, the report names the key
    monkeypatch.setattr(compare, "compare_engines", lambda *a, **k: tampered)
    out = tmp_path / "out"
    code = main(["compare", str(WORDCOUNT), "--lab", str(lab_root), "--out", str(out)])

    assert code == 1
    assert f"first {first}" in capsys.readouterr().out
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "**DISAGREE**" in md
    assert f"`{first}`" in md
    assert (
        json.loads((out / "results.json").read_text(encoding="utf-8"))["agree"] is False
    )


def test_the_html_page_renders_offline_with_every_plot_drawn(
    compared: tuple[Path, dict[str, Any], Path], tmp_path: Path
) -> None:
    out, _, _ = compared
    page = (out / "report.html").read_text(encoding="utf-8")
    assert page.count('src="data:image/png;base64,') == len(PLOTS)
    assert not re.search(r"(src|href)=\"(?!data:)", page)  # self-contained
    assert shutil.which(CHROMIUM), "Debian's chromium is missing: scripts/bootstrap.sh"
    shot = tmp_path / "shot.png"

    subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            # networking off: any request but file:// goes to a closed port
            "--proxy-server=http://127.0.0.1:9",
            "--proxy-bypass-list=<-loopback>",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}",
            "--window-size=1200,2000",
            (out / "report.html").as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )

    pixels = image.imread(str(shot))[:, :, :3]
    for i, name in enumerate(PLOTS):
        top = HEADER_PX + i * PLOT_H
        region = pixels[top : top + PLOT_H, :PLOT_W]
        colored = (region.max(axis=2) - region.min(axis=2) > 0.2).mean()
        assert region.std() > 0.05, f"plot {name} is blank"
        assert colored > 0.002, f"plot {name} has no colored marks"
