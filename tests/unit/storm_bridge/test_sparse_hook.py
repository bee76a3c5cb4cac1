"""``sparse submit``'s hook gives native-mode topologies the hidden generation field.

The topology's Thrift is changed as the hook changes it, then as streamparse
changes it after the hook (``set_topology_serializer`` prepends ``-s json``,
commands containing ``streamparse_run`` are pointed at the virtualenv); the
real ``sparse submit`` is in tests/integration/apache_storm/test_generation_field.py.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from streamparse.util import set_topology_serializer

from storm_bridge.messages import GENERATION_FIELD_KEY, HIDDEN_GENERATION_FIELD
from storm_bridge.sparse.hook import fence_generations, fence_sparse_submit
from storm_bridge.sparse.submit import SubmitError
from tests.conftest import load_module
from topology_api.barriers import WARMUP_STREAM

G = HIDDEN_GENERATION_FIELD
LAUNCHER = "/venvs/wc/bin/sr3_component_run"

TOPOLOGY = """
from streamparse import Bolt, Grouping, JavaBolt, Spout, Topology


class Words(Spout):
    outputs = ["word"]

    def next_tuple(self):
        pass


class Upper(Bolt):
    outputs = ["word", "n"]

    def process(self, tup):
        pass


class Fenced(Topology):
    words = Words.spec()
    upper = Upper.spec(inputs={words: Grouping.fields("word")})
    echo = JavaBolt.spec(
        full_class_name="org.example.Echo", args_list=[], inputs=[upper],
        outputs=["word"],
    )
"""


def _topology(tmp_path: Path) -> Any:
    """A fresh topology class (with a Java bolt) from a file of its own."""
    path = tmp_path / f"fenced_{uuid.uuid4().hex[:8]}.py"
    path.write_text(TOPOLOGY)
    module = load_module(path, path.stem)
    return module.Fenced


def _as_streamparse_submits(cls: Any) -> None:
    """What ``sparse submit`` does to the components after the hook."""
    set_topology_serializer({}, {"serializer": "json"}, cls)
    for component in (*cls.thrift_bolts.values(), *cls.thrift_spouts.values()):
        shell = getattr(component, "bolt_object", None) or component.spout_object
        shell = shell.shell
        if shell is not None and "streamparse_run" in shell.execution_command:
            shell.execution_command = "/venvs/wc/bin/streamparse_run"


def test_python_components_run_the_launcher_with_streamparse_run_arguments(
    tmp_path: Path,
) -> None:
    cls = _topology(tmp_path)
    options: dict[str, Any] = {"sr3.checkpoint.mode": "native"}
    changed = fence_generations(cls, options, launcher=LAUNCHER)
    _as_streamparse_submits(cls)
    assert sorted(changed) == ["upper", "words"]
    assert options[GENERATION_FIELD_KEY] is True
    words = cls.thrift_spouts["words"]
    assert words.spout_object.shell.execution_command == LAUNCHER
    # streamparse_run's arguments, as the launcher takes them
    assert words.spout_object.shell.script == f"-s json {cls.__module__}.Words"
    upper = cls.thrift_bolts["upper"]
    assert upper.bolt_object.shell.execution_command == LAUNCHER
    assert upper.bolt_object.shell.script == f"-s json {cls.__module__}.Upper"
    assert words.common.streams["default"].output_fields == ["word", G]
    assert upper.common.streams["default"].output_fields == ["word", "n", G]
    # a Java bolt's streams stay as declared
    echo = cls.thrift_bolts["echo"]
    assert echo.common.streams["default"].output_fields == ["word"]
    # the rollback's warm-up: from both Python components to the Python bolt
    # only (the Java bolt neither declares nor receives it)
    assert words.common.streams[WARMUP_STREAM].output_fields == ["generation"]
    assert upper.common.streams[WARMUP_STREAM].output_fields == ["generation"]
    assert WARMUP_STREAM not in echo.common.streams
    warm = sorted(
        (k.componentId, g.all is not None)
        for k, g in upper.common.inputs.items()
        if k.streamId == WARMUP_STREAM
    )
    assert warm == [("upper", True), ("words", True)]
    assert all(k.streamId != WARMUP_STREAM for k in echo.common.inputs)


def test_without_native_mode_nothing_changes(tmp_path: Path) -> None:
    cls = _topology(tmp_path)
    for options in (
        {},
        {"sr3.checkpoint.mode": "barrier"},
        {"sr3.checkpoint.mode": "native", GENERATION_FIELD_KEY: False},
    ):
        conf: dict[str, Any] = dict(options)
        assert fence_sparse_submit("wc", conf, local=True) == []
        assert conf == options
    words = cls.thrift_spouts["words"]
    assert words.spout_object.shell.execution_command == "streamparse_run"
    assert words.common.streams["default"].output_fields == ["word"]


def test_a_local_virtualenv_without_the_launcher_names_the_fix(tmp_path: Path) -> None:
    options = {"sr3.checkpoint.mode": "native", "use_virtualenv": False}
    # the launcher on the workers' PATH: nothing to check, but no sparse submit
    with pytest.raises(SubmitError, match="inside streamparse's `sparse submit`"):
        fence_sparse_submit("wc", options, local=False)
    from fabric.api import env  # type: ignore[import-untyped]  # noqa: PLC0415

    old = env.get("virtualenv_root")
    env.virtualenv_root = str(tmp_path)
    try:
        native = {"sr3.checkpoint.mode": "native", "virtualenv_name": "venv"}
        missing = r"venv/bin/sr3_component_run does not exist.*pip install -e \."
        with pytest.raises(SubmitError, match=missing):
            fence_sparse_submit("wc", native, local=True)
    finally:
        env.virtualenv_root = old


@pytest.fixture
def nimbus_yaml() -> Any:
    """Nimbus's storm.yaml as ``getNimbusConf`` returns it (streamparse's cache).

    ``sparse submit`` asks Nimbus once per process and keeps the answer; the
    test puts that answer in place of a Nimbus at ``nimbus.invalid:6627``.
    """
    import streamparse.util as sp_util  # noqa: PLC0415

    conf: dict[str, Any] = {}
    sp_util._nimbus_configs[("nimbus.invalid", 6627)] = conf  # noqa: SLF001
    yield conf
    del sp_util._nimbus_configs[("nimbus.invalid", 6627)]  # noqa: SLF001


def _pre_submit(cls: Any, options: dict[str, Any], monkeypatch: Any) -> None:
    import tasks  # noqa: PLC0415 (the project's streamparse hooks)
    from storm_bridge.sparse import hook  # noqa: PLC0415 (patched per test)

    monkeypatch.setattr(hook, "submitted_topology", lambda: cls)
    tasks.pre_submit("wc", "prod", {"nimbus": "nimbus.invalid:6627"}, options)


def test_a_native_mode_set_in_nimbus_storm_yaml_fences_generations(
    tmp_path: Path, nimbus_yaml: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    nimbus_yaml.update({"sr3.checkpoint.mode": "native", "sr3.zk.hosts": "zk:2181"})
    cls = _topology(tmp_path)
    options: dict[str, Any] = {"use_virtualenv": False}
    _pre_submit(cls, options, monkeypatch)
    assert options["sr3.checkpoint.mode"] == "native"
    assert options[GENERATION_FIELD_KEY] is True
    words = cls.thrift_spouts["words"]
    assert words.spout_object.shell.execution_command == "sr3_component_run"
    assert words.common.streams["default"].output_fields == ["word", G]


def test_storm_yaml_may_turn_the_field_off_and_options_win_over_it(
    tmp_path: Path, nimbus_yaml: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    nimbus_yaml.update(
        {
            "sr3.checkpoint.mode": "native",
            "sr3.zk.hosts": "zk:2181",
            GENERATION_FIELD_KEY: False,
        }
    )
    cls = _topology(tmp_path)
    _pre_submit(cls, {"use_virtualenv": False}, monkeypatch)
    words = cls.thrift_spouts["words"]
    assert words.spout_object.shell.execution_command == "streamparse_run"
    # the submit options say barrier mode: storm.yaml's native mode is not used
    cls = _topology(tmp_path)
    options: dict[str, Any] = {"sr3.checkpoint.mode": "barrier"}
    _pre_submit(cls, options, monkeypatch)
    assert options == {"sr3.checkpoint.mode": "barrier"}


def test_a_native_storm_yaml_without_a_ring_is_refused(
    tmp_path: Path, nimbus_yaml: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    nimbus_yaml["sr3.checkpoint.mode"] = "native"
    with pytest.raises(ValueError, match="needs sr3.zk.hosts"):
        _pre_submit(_topology(tmp_path), {"use_virtualenv": False}, monkeypatch)
