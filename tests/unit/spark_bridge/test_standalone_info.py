"""What ``standalone.json`` records: workers on their hosts, and older files."""

from __future__ import annotations

from spark_bridge.standalone_info import ClusterInfo, WorkerInfo


def test_each_worker_is_named_by_its_host_and_port() -> None:
    info = ClusterInfo(
        master="spark://10.77.5.1:7077",
        master_port=7077,
        master_webui_port=8080,
        workers=(
            WorkerInfo("10.77.5.2", 7078, 8081, "/lab/spark/work"),
            WorkerInfo("10.77.5.3", 7079, 8082, "/lab/spark/work2"),
        ),
        master_host="10.77.5.1",
    )
    assert [w.url for w in info.workers] == [
        "spark://Worker@10.77.5.2:7078",
        "spark://Worker@10.77.5.3:7079",
    ]
    assert info.master_webui == "http://10.77.5.1:8080"
    started = info.with_master_pid(10).with_worker_pid(1, 12)
    assert (started.master_pid, [w.pid for w in started.workers]) == (10, [None, 12])
    assert ClusterInfo.from_json(started.to_json()) == started
    assert started.stopped().master_pid is None
    assert [w.pid for w in started.stopped().workers] == [None, None]


def test_a_file_from_before_several_workers_reads_as_one_loopback_worker() -> None:
    old = {
        "master": "spark://127.0.0.1:7077",
        "master_port": 7077,
        "master_webui_port": 8080,
        "worker_port": 7078,
        "worker_webui_port": 8081,
        "work_dir": "/lab/spark/work",
        "master_pid": 10,
        "worker_pid": 11,
    }
    info = ClusterInfo.from_json(old)
    assert info.workers == (WorkerInfo("127.0.0.1", 7078, 8081, "/lab/spark/work", 11),)
    assert (info.worker_pid, info.work_dir) == (11, "/lab/spark/work")
