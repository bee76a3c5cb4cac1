"""``sr3 run`` refuses a Storm conf value of the wrong type before it touches state.

A run replaces the topology's committed state with its own epochs from its
start: a ``-o`` value the cluster refuses must be refused before that, naming
the key and the fix, with the last committed state intact.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sr3_cli.lab import Lab

pytestmark = [pytest.mark.zk, pytest.mark.storm]

WORDCOUNT = Path(__file__).resolve().parents[3] / "topologies" / "wordcount.py"


def sr3(lab: Lab, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SR3_LAB=str(lab.root))
    return subprocess.run(
        [sys.executable, "-m", "sr3_cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )


#: (-o override, the fix its refusal must name)
BAD_OVERRIDES = [
    ("topology.max.spout.pending=x", "-o topology.max.spout.pending=N"),
    ("topology.enable.message.timeouts=False", "=false (JSON, lower case)"),
    (
        "sr3.checkpoint.timeout.s=soon",
        "sr3.checkpoint.timeout.s='soon' is not a number; use > 0",
    ),
]


def test_bad_conf_values_are_refused_with_the_committed_state_intact(
    lab: Lab,
) -> None:
    run = ["run", str(WORDCOUNT), "--until-idle", "-o", "wordcount.lines=40"]
    first = sr3(lab, *run)
    assert first.returncode == 0, first.stderr
    dump = ["state", "dump", "--topology", "wordcount", "--component", "count"]
    before = sr3(lab, *dump)
    assert before.returncode == 0, before.stderr
    for override, fix in BAD_OVERRIDES:
        refused = sr3(lab, *run, "-o", override)
        assert refused.returncode == 2, (override, refused.stderr)
        assert override.partition("=")[0] in refused.stderr
        assert fix in refused.stderr
        after = sr3(lab, *dump)
        assert after.returncode == 0, after.stderr
        assert after.stdout == before.stdout, override


#: A spout that emits once and a bolt that writes its parent process's command
#: line into ``probe.out``: who started the task.
PARENTS = """
import os
from streamparse import Bolt, Spout, Topology


class OnceSpout(Spout):
    outputs = ["n"]

    def initialize(self, conf, ctx):
        self.left = 1

    def next_tuple(self):
        if self.left:
            self.left -= 1
            self.emit([1])


class ParentBolt(Bolt):
    outputs = []

    def initialize(self, conf, ctx):
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            parent = f.read().replace(b"\\0", b" ").decode()
        with open(os.path.join(conf["probe.out"], str(os.getpid())), "w") as f:
            f.write(parent)

    def process(self, tup):
        pass


class Parents(Topology):
    once_spout = OnceSpout.spec()
    parent_bolt = ParentBolt.spec(inputs=[once_spout], par=2)
"""


@pytest.mark.parametrize(
    ("override", "parent"),
    [
        ((), "storm_bridge.cluster.zygote"),
        (("-o", "sr3.local.fork.tasks=false"), "sr3_cli"),
    ],
    ids=["forked", "executed"],
)
def test_sr3_local_fork_tasks_chooses_who_starts_the_tasks(
    lab: Lab, tmp_path: Path, override: tuple[str, ...], parent: str
) -> None:
    topology = tmp_path / "parents.py"
    topology.write_text(PARENTS)
    out = tmp_path / "out"
    out.mkdir()
    run = sr3(
        lab, "run", str(topology), "--until-idle", "--no-checkpoints",
        "-o", f"probe.out={out}", "-o", "sr3.idle.quiet.s=0.2", *override,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    parents = [p.read_text() for p in out.iterdir()]
    assert len(parents) == 2, parents
    assert all(parent in p for p in parents), parents
