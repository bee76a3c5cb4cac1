"""How long an ``sr3`` process or a local-cluster task takes before it does anything.

Every ring node of a lab is an ``sr3 node`` process, and every ``sr3 run``,
chaos child and CLI test starts one more; each pays the start-up measured here,
as does every task subprocess of the Storm engine's local cluster (one
``streamparse_run`` per task and restart: about 150 in
``tests/e2e/test_local_recovery.py`` alone). In one run, median of ``--repeat``
runs of each, as wall and as CPU seconds (user + system: what a loaded 2-core
machine pays):

* ``python -c pass``: the interpreter alone (the baseline, in the same run);
* importing ``sr3_cli.main`` and building the whole ``sr3`` parser, timed
  inside the process (what every command pays before its handler);
* ``sr3 --help``, ``sr3 node --help`` and ``sr3 run --help``;
* ``sr3 node`` up to its first check (``--host 0.0.0.0`` is refused once the
  node's modules are loaded, before it connects anywhere): a ring node's
  start-up before it serves;
* ``sr3 state dump`` up to its first check (a lab dir that does not exist is
  refused once the handler's modules are loaded);
* a local-cluster task's imports, as ``streamparse_run`` runs them in the
  topology's directory (``tests/e2e/topologies/exact_parts.py``): a spout's or
  plain bolt's task, and a stateful bolt's, which loads its ring runtime when
  the handshake starts it.

``--before DIR`` also runs every command from another checkout (for instance
``git worktree add --detach /tmp/sr3-main main``), interleaved with this one's
so that load from elsewhere hits both alike, and adds the after/before ratio.

``--before-no-bytecode`` makes "before" this commit without bytecode caches: a
fresh export of HEAD run with ``PYTHONDONTWRITEBYTECODE=1``, as these machines'
environment sets it, so every process compiles the project's modules again
(the standard library's and the virtualenv's caches, written when they were
installed, still load). "after" is this tree with caches written, as ``make``
runs it.

    .venv/bin/python bench/cli_startup.py --repeat 15 --before /tmp/sr3-main
    .venv/bin/python bench/cli_startup.py --repeat 10 --before-no-bytecode

Writes ``bench/results/cli_startup.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
BASELINE = "python -c pass"
#: In-process: prints the seconds to import sr3_cli.main and build the parser.
_PARSER_PROBE = (
    "import time; t = time.perf_counter(); from sr3_cli.main import build_parser; "
    "build_parser(); print(time.perf_counter() - t)"
)


#: A task subprocess's imports: streamparse_run's, then the topology module's.
_TASK_PROBE = (
    "import importlib, sys; import streamparse.run; "
    "sys.path.append('tests/e2e/topologies'); importlib.import_module('exact_parts')"
)
#: What a stateful bolt's task loads on top, when its handshake starts it.
_STATEFUL_PROBE = _TASK_PROBE + "; import storm_bridge.bolt_runtime"
#: Every row's CPU seconds go under this suffix.
CPU = " [cpu]"


def _commands(data_dir: str) -> dict[str, list[str]]:
    sr3 = [sys.executable, "-m", "sr3_cli"]
    anywhere = "0.0.0.0"  # noqa: S104 - the address `sr3 node` refuses
    no_lab = str(Path(data_dir) / "no-lab")
    return {
        BASELINE: [sys.executable, "-c", "pass"],
        "sr3 --help": [*sr3, "--help"],
        "sr3 node --help": [*sr3, "node", "--help"],
        "sr3 run --help": [*sr3, "run", "--help"],
        "sr3 node, up to its first check": [
            *sr3, "node", "--zk", "127.0.0.1:1", "--host", anywhere,
            "--data-dir", data_dir,
        ],
        "sr3 state dump, up to its first check": [
            *sr3, "state", "dump", "--topology", "t", "--component", "c",
            "--lab", no_lab,
        ],
        "task: spout or plain bolt (imports)": [sys.executable, "-c", _TASK_PROBE],
        "task: stateful bolt (imports)": [sys.executable, "-c", _STATEFUL_PROBE],
    }  # fmt: skip


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _env(tree: Path, extra: dict[str, str]) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree), **extra}


def _wall(argv: list[str], tree: Path, extra: dict[str, str]) -> tuple[float, float]:
    """Run ``argv`` in ``tree`` with ``extra`` env; return its wall and CPU seconds."""
    env = _env(tree, extra)
    cpu = _children_cpu()
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=tree, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    if proc.returncode not in (0, 2):
        msg = f"{' '.join(argv)} in {tree} exited {proc.returncode}: {proc.stderr!r}"
        raise RuntimeError(msg)
    return elapsed, _children_cpu() - cpu


def _parser_build(tree: Path, extra: dict[str, str]) -> float:
    env = _env(tree, extra)
    out = subprocess.run(
        [sys.executable, "-c", _PARSER_PROBE],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return float(out.strip())


def measure(
    trees: dict[str, Path], repeat: int, envs: dict[str, dict[str, str]] | None = None
) -> dict[str, Any]:
    """Return every command's run times per tree, rounds interleaved.

    ``envs`` adds environment variables per tree label.
    """
    extra = {label: (envs or {}).get(label, {}) for label in trees}
    with tempfile.TemporaryDirectory(prefix="sr3-cli-startup-") as tmp:
        commands = _commands(tmp)
        names = [
            *commands,
            "import sr3_cli + build the parser (in-process)",
            *(name + CPU for name in commands),
        ]
        runs: dict[str, dict[str, list[float]]] = {
            label: {name: [] for name in names} for label in trees
        }
        for label, tree in trees.items():  # warm-up, not counted: byte-compiles
            for argv in commands.values():
                _wall(argv, tree, extra[label])
        for _ in range(repeat):
            for label, tree in trees.items():
                for name, argv in commands.items():
                    wall, cpu = _wall(argv, tree, extra[label])
                    runs[label][name].append(wall)
                    runs[label][name + CPU].append(cpu)
                build = _parser_build(tree, extra[label])
                runs[label][names[len(commands)]].append(build)
    pooled = [t for by_name in runs.values() for t in by_name[BASELINE]]
    pooled_cpu = [t for by_name in runs.values() for t in by_name[BASELINE + CPU]]
    return {
        "repeat": repeat,
        "baseline_s": statistics.median(pooled),
        "baseline_cpu_s": statistics.median(pooled_cpu),
        "trees": {label: str(tree) for label, tree in trees.items()},
        "env": extra,
        "load_after": os.getloadavg()[0],
        "runs": runs,
        "median_s": {
            label: {n: statistics.median(v) for n, v in by_name.items()}
            for label, by_name in runs.items()
        },
    }


def markdown(r: dict[str, Any]) -> str:
    after = r["median_s"]["after"]
    before = r["median_s"].get("before")
    base = r["baseline_s"]  # the same command in every tree: pooled
    head = "| command (wall, or [cpu] user + system) | median s | x python -c pass |"
    rule = "| --- | ---: | ---: |"
    if before is not None:
        head += " before: median s | before: x python -c pass | after / before |"
        rule += " ---: | ---: | ---: |"
    envs = {label: env for label, env in r.get("env", {}).items() if env}
    sides = "".join(f" {label}: {env}." for label, env in sorted(envs.items()))
    lines = [
        f"Medians of {r['repeat']} runs, rounds interleaved;{sides} load average "
        f"{r['load_after']:.1f} at the end (2 cores). x python -c pass: against "
        f"its median over every tree's runs, {base:.3f} s wall and "
        f"{r['baseline_cpu_s']:.3f} s CPU ([cpu] rows).",
        "",
        head,
        rule,
    ]
    for name, s in after.items():
        # CPU rows against the interpreter's CPU, wall rows against its wall time
        unit = r["baseline_cpu_s"] if name.endswith(CPU) else base
        row = f"| {name} | {s:.3f} | {s / unit:.1f} |"
        if before is not None:
            b = before[name]
            row += f" {b:.3f} | {b / unit:.1f} | {s / b:.2f} |"
        lines.append(row)
    return "\n".join(lines) + "\n"


def plot(r: dict[str, Any], out: Path) -> None:
    import matplotlib  # noqa: PLC0415 (only when plotting)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 (only when plotting)

    medians = r["median_s"]
    names = [n for n in medians["after"] if not n.endswith(CPU)]
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(medians)
    for i, (label, by_name) in enumerate(sorted(medians.items(), reverse=True)):
        xs = [j + (i - (len(medians) - 1) / 2) * width for j in range(len(names))]
        bars = ax.bar(xs, [by_name[n] for n in names], width, label=label)
        ax.bar_label(bars, fmt="%.2f", fontsize=8)
    ax.set_xticks(range(len(names)))
    wrapped = [n.replace(" (", "\n(").replace(", ", ",\n") for n in names]
    ax.set_xticklabels([n.replace(" + ", " +\n") for n in wrapped])
    ax.tick_params(axis="x", labelsize=8)
    ax.set_ylabel("wall seconds (median)")
    ax.set_title(f"sr3 start-up, median of {r['repeat']} runs")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def _export_head(into: Path) -> Path:
    """Write HEAD's files (no ``__pycache__``) under ``into``; return it."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "HEAD"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=15, help="runs of each (15)")
    parser.add_argument(
        "--before",
        type=Path,
        default=None,
        metavar="DIR",
        help="another checkout to measure alongside this one (as main's)",
    )
    parser.add_argument(
        "--before-no-bytecode",
        action="store_true",
        help="before: HEAD exported afresh, run with PYTHONDONTWRITEBYTECODE=1",
    )
    parser.add_argument("--json", action="store_true", help="print JSON, not Markdown")
    args = parser.parse_args()
    if args.before is not None and args.before_no_bytecode:
        parser.error("--before and --before-no-bytecode: choose one")
    trees = {"after": ROOT}
    envs = {"after": {"PYTHONDONTWRITEBYTECODE": ""}}
    with tempfile.TemporaryDirectory(prefix="sr3-no-bytecode-") as export:
        if args.before is not None:
            if not (args.before / "sr3_cli" / "main.py").is_file():
                parser.error(f"--before {args.before}: no sr3 checkout (sr3_cli/)")
            trees["before"] = args.before.resolve()
        elif args.before_no_bytecode:
            trees["before"] = _export_head(Path(export))
            envs["before"] = {"PYTHONDONTWRITEBYTECODE": "1"}
        result = measure(trees, args.repeat, envs)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "cli_startup.json").write_text(json.dumps(result, indent=2) + "\n")
    text = markdown(result)
    (RESULTS / "cli_startup.md").write_text(text)
    plot(result, RESULTS / "cli_startup.png")
    print(json.dumps(result["median_s"], indent=2) if args.json else text)


if __name__ == "__main__":
    main()
