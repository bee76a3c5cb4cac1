"""Golden multilang transcripts against real ``streamparse_run`` subprocesses.

Each test plays Storm's side by hand (handshake, tuples, heartbeats, ticks, spout
commands) and checks every message the pystorm component answers with, for both
serializers. The messages Storm sends are built with ``storm_bridge.multilang``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from storm_bridge.messages import bolt_tuple_msg, heartbeat_msg, spout_command_msg

pytestmark = [
    pytest.mark.storm,
    pytest.mark.parametrize("serializer", ["json", "msgpack"]),
]

LOGGING_ENABLED = {
    "command": "log",
    "msg": "pystorm StormHandler logging enabled, so all messages at levels greater "
    'than "pystorm.log.level" (info) will be sent to Storm.',
    "level": 2,
}


def context(task: int, component: str, sources: dict[str, Any]) -> dict[str, Any]:
    return {
        "taskid": task,
        "componentid": component,
        "task->component": {
            "1": "sentence_spout",
            "2": "split_bolt",
            str(task): component,
        },
        "source->stream->fields": sources,
    }


BOLT_CONTEXT = context(3, "split_bolt", {"sentence_spout": {"default": ["sentence"]}})


def start_bolt(drive: Callable[..., Any], class_path: str, serializer: str) -> Any:
    driver = drive(class_path, serializer)
    conf = {"topology.name": "transcripts", "sbt.out_dir": str(driver.pid_dir)}
    pid = driver.handshake(conf, BOLT_CONTEXT)
    assert (driver.pid_dir / str(pid)).is_file()  # the pid file Storm reads
    assert driver.recv() == LOGGING_ENABLED
    return driver


def test_bolt_emit_ack_heartbeat_tick(
    drive: Callable[..., Any], serializer: str
) -> None:
    bolt = start_bolt(drive, "sbt_components.SplitBolt", serializer)

    bolt.send(
        bolt_tuple_msg("-6955786537413359385", "sentence_spout", "default", 1, ["a b!"])
    )
    assert bolt.recv_until(lambda m: m["command"] == "ack") == [
        {
            "command": "emit",
            "tuple": ["a"],
            "anchors": ["-6955786537413359385"],
            "need_task_ids": False,
        },
        {
            "command": "emit",
            "tuple": ["b!"],
            "anchors": ["-6955786537413359385"],
            "need_task_ids": False,
        },
        {
            "command": "emit",
            "tuple": ["B!"],
            "anchors": ["-6955786537413359385"],
            "stream": "loud",
            "need_task_ids": False,
        },
        {"command": "ack", "id": "-6955786537413359385"},
    ]

    bolt.send(heartbeat_msg("77"))
    assert bolt.recv() == {"command": "sync"}

    bolt.send(bolt_tuple_msg("k1", "__system", "__tick", -1, [1]))
    assert bolt.recv() == {"command": "ack", "id": "k1"}

    assert bolt.close() == 2  # stdin closed: pystorm exits with 2


def test_bolt_waits_for_task_ids(drive: Callable[..., Any], serializer: str) -> None:
    bolt = drive("sbt_components.DirectSplitBolt", serializer)
    direct_context = dict(
        BOLT_CONTEXT, **{"task->component": {"5": "direct_sink", "6": "direct_sink"}}
    )
    bolt.handshake({}, direct_context)
    assert bolt.recv() == LOGGING_ENABLED

    bolt.send(bolt_tuple_msg("t1", "sentence_spout", "default", 1, ["hey"]))
    assert bolt.recv() == {
        "command": "emit",
        "tuple": ["hey"],
        "anchors": ["t1"],
        "stream": "direct",
        "task": 6,  # len("hey") % 2 -> second direct_sink task
        "need_task_ids": False,
    }
    # need_task_ids=True: the key is omitted (Storm's default is true).
    assert bolt.recv() == {"command": "emit", "tuple": ["hey"], "anchors": ["t1"]}
    bolt.send([11, 12])
    assert bolt.recv_until(lambda m: m["command"] == "ack") == [
        {"command": "log", "msg": "default hey -> [11, 12]", "level": 2},
        {"command": "ack", "id": "t1"},
    ]


def test_bolt_failure_reports_error_and_fails(
    drive: Callable[..., Any], serializer: str
) -> None:
    bolt = start_bolt(drive, "sbt_components.FaultyBolt", serializer)
    bolt.send(bolt_tuple_msg("p1", "split_bolt", "default", 2, ["poison"]))
    replies = bolt.recv_until(lambda m: m["command"] == "fail")
    error = next(m for m in replies if m["command"] == "error")
    assert "ValueError" in error["msg"]
    assert "values=('poison',)" in error["msg"]
    assert replies[-2:] == [{"command": "sync"}, {"command": "fail", "id": "p1"}]
    assert bolt.proc.wait(timeout=15) == 1  # exit_on_exception


def test_spout_commands(drive: Callable[..., Any], serializer: str) -> None:
    spout = drive("sbt_components.SentenceSpout", serializer)
    spout_context = context(1, "sentence_spout", {})
    spout.handshake({"sbt.sentences": ["hello world"]}, spout_context)
    assert spout.recv() == LOGGING_ENABLED

    spout.send(spout_command_msg("activate"))
    assert spout.recv_until(lambda m: m["command"] == "sync") == [
        {"command": "log", "msg": "activated", "level": 2},
        {"command": "sync"},
    ]
    spout.send(spout_command_msg("next"))
    assert spout.recv_until(lambda m: m["command"] == "sync") == [
        {
            "command": "emit",
            "tuple": ["hello world"],
            "id": "0",
            "need_task_ids": False,
        },
        {"command": "sync"},
    ]
    spout.send(spout_command_msg("next"))  # exhausted: nothing but sync
    assert spout.recv() == {"command": "sync"}
    spout.send(spout_command_msg("ack", "0"))
    assert spout.recv_until(lambda m: m["command"] == "sync") == [
        {"command": "log", "msg": "acked 0", "level": 2},
        {"command": "sync"},
    ]
    spout.send(spout_command_msg("fail", "0"))
    assert spout.recv_until(lambda m: m["command"] == "sync") == [
        {"command": "log", "msg": "failed 0", "level": 2},
        {"command": "sync"},
    ]
    spout.send(spout_command_msg("deactivate"))
    assert spout.recv_until(lambda m: m["command"] == "sync") == [
        {"command": "log", "msg": "deactivated", "level": 2},
        {"command": "sync"},
    ]
