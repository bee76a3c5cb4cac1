"""Storm-side multilang messages and the parsing of what subprocesses send."""

from __future__ import annotations

import pytest

from storm_bridge.errors import MultilangProtocolError
from storm_bridge.messages import (
    ShellMsg,
    heartbeat_msg,
    parse_pid_reply,
    parse_shell_msg,
    spout_command_msg,
)


class TestParseShellMsg:
    def parse(self, raw: object) -> ShellMsg:
        return parse_shell_msg(raw, component="count", task_id=4)

    def test_storm_defaults(self) -> None:
        msg = self.parse({"command": "emit", "tuple": ["a"]})
        assert msg == ShellMsg(command="emit", values=["a"])
        assert (msg.stream, msg.task, msg.need_task_ids, msg.anchors) == (
            "default",
            0,
            True,
            (),
        )

    def test_full_emit(self) -> None:
        raw = {
            "command": "emit",
            "tuple": [1],
            "stream": "loud",
            "task": 9,
            "anchors": ["x", "y"],
            "need_task_ids": False,
            "id": "m1",
        }
        msg = self.parse(raw)
        assert (msg.stream, msg.task, msg.anchors, msg.need_task_ids, msg.msg_id) == (
            "loud",
            9,
            ("x", "y"),
            False,
            "m1",
        )

    def test_single_anchor_string(self) -> None:
        assert self.parse({"command": "emit", "anchors": "x"}).anchors == ("x",)

    def test_log_and_metrics(self) -> None:
        log = self.parse({"command": "log", "msg": "hi", "level": 3})
        assert (log.msg, log.level) == ("hi", 3)
        metric = self.parse({"command": "metrics", "name": "m", "params": [1, 2]})
        assert (metric.metric_name, metric.metric_params) == ("m", [1, 2])

    @pytest.mark.parametrize(
        ("raw", "match"),
        [
            ([1, 2], "sent list"),
            ({"id": "x"}, "without a command"),
            ({"command": "emit", "task": "9"}, "task '9' is not an int"),
            ({"command": "emit", "stream": 5}, "stream 5 is not a string"),
            ({"command": "emit", "tuple": "abc"}, "is not a list"),
            ({"command": "emit", "anchors": [1]}, "are not strings"),
            ({"command": "emit", "anchors": 1}, "not a list of ids"),
            ({"command": "emit", "need_task_ids": 1}, "is not a bool"),
        ],
    )
    def test_rejects(self, raw: object, match: str) -> None:
        with pytest.raises(MultilangProtocolError, match=match) as info:
            self.parse(raw)
        assert "component 'count' task 4" in str(info.value)


def test_pid_reply() -> None:
    assert parse_pid_reply({"pid": 42}, component="c", task_id=1) == 42
    with pytest.raises(MultilangProtocolError, match="instead of"):
        parse_pid_reply({"command": "sync"}, component="c", task_id=1)


def test_storm_side_messages() -> None:
    assert heartbeat_msg("7") == {
        "id": "7",
        "comp": None,
        "stream": "__heartbeat",
        "task": -1,
        "tuple": [],
    }
    assert spout_command_msg("next") == {"command": "next", "id": ""}
    assert spout_command_msg("ack", 5) == {"command": "ack", "id": 5}
