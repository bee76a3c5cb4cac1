"""``sparse submit`` refuses a KafkaSink at another task count than its committed epoch.

The project's ``pre_submit`` hook (``tasks.py``) runs as streamparse calls it,
with the topology class streamparse imported; the committed epoch is a real
commit record in ZooKeeper, written with two sink task owners. The real
``sparse submit`` to Storm is in tests/integration/apache_storm/.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from sr3.config import ZkConfig
from sr3.errors import ConfigError
from tests.conftest import load_module
from zk.checkpoints import CommitRecord, ZkCheckpointStore
from zk.client import ZkSession

pytestmark = [pytest.mark.zk]

TOPOLOGY = """
from streamparse import Grouping, JavaBolt, Spout, Topology

from storm_bridge.kafka import KafkaSink


class Counts(Spout):
    outputs = ["word", "count"]

    def next_tuple(self):
        pass


class Sinking(Topology):
    counts = Counts.spec()
    results = KafkaSink.spec(
        inputs={counts: Grouping.fields("word")}, par={"prod": 3, "small": 2}
    )
    echo = JavaBolt.spec(
        full_class_name="org.example.Echo", args_list=[], inputs=[counts],
        outputs=["word"],
    )
"""


def _topology(tmp_path: Path) -> Any:
    path = tmp_path / f"sinking_{uuid.uuid4().hex[:8]}.py"
    path.write_text(TOPOLOGY)
    module = load_module(path, path.stem)
    return module.Sinking


def _pre_submit(
    cls: Any, env: str, zk_config: ZkConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tasks  # noqa: PLC0415 (the project's streamparse hooks)
    from storm_bridge.sparse import hook  # noqa: PLC0415 (patched per test)

    monkeypatch.setattr(hook, "submitted_topology", lambda: cls)
    options = {
        "sr3.checkpoint.mode": "barrier",
        "sr3.zk.hosts": zk_config.hosts,
        "sr3.zk.chroot": zk_config.chroot,
    }
    tasks.pre_submit("sinking", env, {"nimbus": "nimbus.invalid:6627"}, options)


def test_a_kafka_sink_at_another_count_than_committed_is_refused(
    tmp_path: Path,
    zk_config: ZkConfig,
    zk_session: ZkSession,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cls = _topology(tmp_path)
    # nothing committed yet: any count goes
    _pre_submit(cls, "prod", zk_config, monkeypatch)
    owners = ("sinking/results/0", "sinking/results/1", "sinking/counts/0")
    ZkCheckpointStore(zk_session).commit(
        "sinking", CommitRecord(epoch=4, offsets={}, owners=owners)
    )
    with pytest.raises(ConfigError) as refused:
        _pre_submit(cls, "prod", zk_config, monkeypatch)
    says = str(refused.value)
    assert "'results' of topology 'sinking' committed epoch 4" in says
    assert "with 2 task(s) and would start from it with 3" in says
    assert "sparse submit" in says
    # the committed count goes through (the Java bolt is not in the way)
    _pre_submit(cls, "small", zk_config, monkeypatch)
