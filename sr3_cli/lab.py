"""A local lab: an embedded ZooKeeper and N ring node processes under one directory.

Layout of a lab dir::

    lab.json          ports, pids and data dirs (written by ``sr3 lab up``)
    lab.lock          held (``flock``) by whatever changes lab.json; holds its pid
    secret            the ring's shared HMAC secret
    zk/               ZooKeeper's data dir and log (none with ``sr3 lab up --zk``:
                      the lab uses that ZooKeeper, :mod:`sr3_cli.lab_zk`)
    nodes/<id>/       each node's data dir and node.log
    spark/            with ``sr3 lab up --spark``: a Spark standalone master and
                      worker(s) (logs, work dirs); lab.json's ``spark.master`` is
                      its URL (in a netns lab: master on h1, workers on h2, h3)
    storm/            with ``sr3 lab up --storm``: a real Apache Storm cluster (Nimbus,
                      supervisors, their workers; :mod:`sr3_cli.lab_storm`);
                      lab.json's ``storm.nimbus`` is Nimbus's Thrift address
    prometheus/       with ``sr3 lab up --metrics``: a Prometheus server (config,
                      data, log; :mod:`sr3_cli.lab_metrics`) and targets/, the
                      endpoints it scrapes
    kafka/            with ``sr3 lab up --kafka``: an Apache Kafka KRaft broker (data,
                      logs; :mod:`sr3_cli.lab_kafka`); lab.json's ``kafka.bootstrap``
                      is its address

lab.json, and the lock under which it alone changes, is
:class:`~sr3_cli.lab_state.LabState`'s; :class:`Lab` adds what starts and stops
the lab's processes: ZooKeeper here, the ring nodes with
:mod:`sr3_cli.lab_nodes`, the optional services with :mod:`sr3_cli.lab_spark`,
:mod:`sr3_cli.lab_storm` and :mod:`sr3_cli.lab_kafka`. Every daemon the lab
starts runs in a session of its own with a path under the lab dir among its
arguments or as its working directory, so ``sr3 lab down`` finds it even when
lab.json is stale or gone (:func:`sr3_cli.processes.lab_processes`).
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import subprocess
from pathlib import Path

from sr3.config import NodeConfig, Sr3Config, ZkConfig
from sr3.errors import ConfigError, SR3Error
from sr3_cli import lab_netns, lab_spark, lab_zk
from sr3_cli.lab_nodes import node_log, spawn_node, wait_ready
from sr3_cli.lab_state import LabState, resolve_lab_dir
from sr3_cli.labfile import LabNode
from sr3_cli.processes import lab_processes, stop_lab_processes, stop_processes
from sr3_cli.processes import runs as _runs
from sr3_cli.processes import terminate as _terminate

__all__ = ["Lab", "LabNode", "resolve_lab_dir"]

logger = logging.getLogger(__name__)


class Lab(LabState):
    """A lab directory and what runs in it.

    Methods that change what runs (``start_*``, ``stop_*``, ``add_nodes``) hold
    the lab's lock and first re-read lab.json, so an object loaded long ago (by
    a run that lasts minutes) never writes back what it read then.
    """

    @property
    def zookeeper_running(self) -> bool:
        """Whether the lab's ZooKeeper process runs (not another on its pid).

        An external ZooKeeper (``sr3 lab up --zk``) counts as running: the lab
        neither starts nor stops it, and a command that cannot reach it says so.
        """
        if self.zk_external:
            return True
        return _runs(self.zk_pid, self.root / "zk" / "zoo.cfg")

    @property
    def zk_hosts(self) -> str:
        """Client connect string of the lab's ZooKeeper (its host's, with --netns)."""
        if self.zk_external:
            return self.zk_external
        placement = lab_netns.zk_placement(self)
        host = placement.address if placement else "127.0.0.1"
        return f"{host}:{self.zk_port}"

    @property
    def secret_file(self) -> Path:
        """The ring's shared secret."""
        return self.root / "secret"

    def secret(self) -> str:
        """Return the shared secret, creating it on first use.

        Raises:
            ConfigError: the secret file is empty or unreadable.
        """
        try:
            if not self.secret_file.exists():
                self.root.mkdir(parents=True, exist_ok=True)
                self.secret_file.write_text(secrets.token_hex(32), encoding="utf-8")
                self.secret_file.chmod(0o600)
            secret = self.secret_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeError) as exc:
            msg = f"cannot read the lab's secret file {self.secret_file}: {exc}"
            raise ConfigError(msg) from exc
        if not secret:
            msg = (
                f"the lab's secret file {self.secret_file} is empty; delete it and "
                "run `sr3 lab up` again, which writes a new one (stored replicas "
                "stay readable: the secret only authenticates connections)"
            )
            raise ConfigError(msg)
        return secret

    def config(self, base: Sr3Config | None = None) -> Sr3Config:
        """Return ``base`` pointed at this lab's ZooKeeper and secret."""
        cfg = base or Sr3Config()
        return Sr3Config(
            ring=cfg.ring,
            node=NodeConfig(
                secret=self.secret(),
                max_frame_bytes=cfg.node.max_frame_bytes,
                io_timeout_s=cfg.node.io_timeout_s,
                connect_timeout_s=cfg.node.connect_timeout_s,
                chunk_bytes=cfg.node.chunk_bytes,
            ),
            zk=ZkConfig(
                hosts=self.zk_hosts,
                chroot=self.chroot,
                session_timeout_s=cfg.zk.session_timeout_s,
                connect_timeout_s=cfg.zk.connect_timeout_s,
                digest=cfg.zk.digest,
            ),
            repair=cfg.repair,
            recovery=cfg.recovery,
        )

    # --- ZooKeeper -------------------------------------------------------------

    def start_zookeeper(self) -> None:
        """Start the lab's ZooKeeper unless it runs already (same port on restart).

        A lab on an external ZooKeeper (``sr3 lab up --zk``) starts nothing.
        One that runs from the lab's zk dir but is missing from lab.json (a
        stale copy written back by hand) is adopted, not started twice.

        Raises:
            ZooKeeperMissingError: java or ZooKeeper is not installed.
            CoordinationError: it did not start (the message quotes its log).
        """
        with self.locked():
            self._start_zookeeper()

    def use_zookeeper(self, hosts: str, *, netns: bool = False) -> None:
        """Make a new lab use the running ZooKeeper at ``hosts`` instead of its own.

        ``netns``: the lab is to be built on hosts (refused). See
        :func:`sr3_cli.lab_zk.use_external`.

        Raises:
            ConfigError: as that function does.
        """
        with self.locked():
            lab_zk.use_external(self, hosts, netns=netns)

    def _start_zookeeper(self) -> None:
        if not self.zookeeper_running:
            lab_zk.start_own(self)

    def stop_zookeeper(self) -> None:
        """Stop the lab's ZooKeeper (an external one is left running)."""
        with self.locked():
            if self.zk_external:
                return
            if self.zookeeper_running:
                _terminate(self.zk_pid)
            self.zk_pid = None

    # --- Spark standalone cluster ----------------------------------------------

    def start_spark(self, *, cores: int = 2, memory: str = "2g") -> str:
        """Start the lab's Spark master and workers unless they run; return its URL.

        Raises:
            SR3Error: java or pyspark is missing, or a daemon did not start (the
                message quotes its log).
        """
        with self.locked():
            self.secret()  # a netns lab's start wrappers read it (vagrant/provision)
            return lab_spark.start_spark(
                self, cores=cores, memory=memory, secret_file=self.secret_file
            )

    def stop_spark(self) -> None:
        """Stop the lab's Spark workers, master and executors, if any."""
        with self.locked():
            lab_spark.stop_spark(self)

    def stop_storm(self) -> None:
        """Stop the lab's Storm supervisors, their workers and Nimbus, if any."""
        from sr3_cli.lab_storm import stop_storm  # noqa: PLC0415 (it imports this module)

        stop_storm(self)

    def stop_prometheus(self) -> None:
        """Stop the lab's Prometheus server, if any."""
        from sr3_cli.lab_metrics import stop_prometheus  # noqa: PLC0415 (it imports this module)

        stop_prometheus(self)

    def stop_kafka(self) -> None:
        """Stop the lab's Kafka broker, if any."""
        from sr3_cli.lab_kafka import stop_kafka  # noqa: PLC0415 (it imports this module)

        stop_kafka(self)

    # --- nodes -----------------------------------------------------------------

    def add_nodes(self, count: int, zones: list[str] | None = None) -> list[str]:
        """Define ``count`` more nodes (not started) and return their ids."""
        added = []
        with self.locked():
            for _ in range(count):
                index = len(self.nodes) + 1
                node_id = f"node-{index}"
                zone = zones[(index - 1) % len(zones)] if zones else None
                data_dir = self.root / "nodes" / node_id
                self.nodes[node_id] = LabNode(
                    node_id=node_id, data_dir=str(data_dir), zone=zone
                )
                added.append(node_id)
        return added

    def start_nodes(self, node_ids: list[str], *, log_level: str = "INFO") -> None:
        """Start the given nodes (those not running) and wait until each is ready.

        The lab is locked while the nodes are spawned and their pids recorded;
        a second command starting the same nodes then finds them running. It
        is not locked while they come up (inside a command that holds the lock
        it stays locked): a node waiting for a ZooKeeper that is restarting must
        not keep the command restarting ZooKeeper from taking the lock.

        Raises:
            SR3Error: a node exited or did not become ready in time.
        """
        if self._lock_depth:
            if self._start_nodes(node_ids, log_level=log_level):
                self._refresh_metrics_targets()
            return
        with self.locked():
            started, offsets = self._spawn_nodes(node_ids, log_level=log_level)
        ports, failure = self._wait_all_ready(started, offsets)
        with self.locked():
            for node_id, port in ports.items():
                node = self.nodes.get(node_id)
                if node is not None and node.pid == started[node_id].pid:
                    node.port = port
        if failure is not None:
            raise failure
        if started:
            self._refresh_metrics_targets()

    def _refresh_metrics_targets(self) -> None:
        """Point the lab's Prometheus at the nodes' endpoints (new after a restart)."""
        if self.prometheus is None:
            return
        from sr3_cli.cluster import open_cluster  # noqa: PLC0415 (it imports this module)
        from sr3_cli.lab_metrics import refresh_node_targets  # noqa: PLC0415

        with open_cluster(self.config(), create=False) as cluster:
            refresh_node_targets(self, cluster.membership.metrics_urls())

    def _start_nodes(self, node_ids: list[str], *, log_level: str) -> bool:
        """Start the nodes not running (lock held); return whether any started."""
        started, offsets = self._spawn_nodes(node_ids, log_level=log_level)
        ports, failure = self._wait_all_ready(started, offsets)
        for node_id, port in ports.items():
            self.nodes[node_id].port = port
        if failure is not None:
            raise failure
        return bool(started)

    def _wait_all_ready(
        self, started: dict[str, subprocess.Popen[bytes]], offsets: dict[str, int]
    ) -> tuple[dict[str, int], SR3Error | None]:
        """Wait for every started node; return the ports and the first failure.

        A node that did not start does not stop the wait for the others: they
        run on, so their ports are recorded and read from their stdout pipes.
        """
        ports: dict[str, int] = {}
        failure: SR3Error | None = None
        for node_id, proc in started.items():
            try:
                ports[node_id] = self._wait_ready(node_id, proc, offsets[node_id])
            except SR3Error as exc:
                failure = failure or exc
        return ports, failure

    def _spawn_nodes(
        self, node_ids: list[str], *, log_level: str
    ) -> tuple[dict[str, subprocess.Popen[bytes]], dict[str, int]]:
        """Start the nodes not running; return their processes and log offsets."""
        self.check_nodes(node_ids)
        self.secret()  # created before any node reads it
        started: dict[str, subprocess.Popen[bytes]] = {}
        offsets: dict[str, int] = {}  # where each node's log of this start begins
        for node_id in node_ids:
            node = self._node(node_id)
            if node.alive:
                continue
            where = lab_netns.node_placement(self, node_id)
            started[node_id], offsets[node_id] = spawn_node(
                node, zk_hosts=self.zk_hosts, chroot=self.chroot,
                secret_file=self.secret_file, log_level=log_level,
                host=where.address if where else "127.0.0.1",
                command_prefix=where.prefix if where else (),
            )  # fmt: skip
        self._checkpoint()  # their pids, should this command die while they start
        return started, offsets

    def _wait_ready(
        self, node_id: str, proc: subprocess.Popen[bytes], log_offset: int
    ) -> int:
        """Wait for a started node's READY line; return the port it listens on."""
        return wait_ready(node_id, proc, node_log(self.nodes[node_id]), log_offset)

    def kill_nodes(self, node_ids: list[str], sig: int = signal.SIGKILL) -> list[str]:
        """Send ``sig`` (SIGKILL by default) to the given nodes; return those running.

        The pids come from lab.json as it is now (a node restarted since this
        object was loaded has a new one); nothing is written.

        Raises:
            ConfigError: a node id is not in the lab (then no node is signalled),
                or lab.json cannot be read.
        """
        current = Lab.load(self.root) if self.exists(self.root) else self
        current.check_nodes(node_ids)
        nodes = [current.nodes[node_id] for node_id in node_ids]
        signalled = []
        for node in nodes:
            if node.pid and node.alive:
                os.kill(node.pid, sig)
                signalled.append(node.node_id)
        return signalled

    def stop_nodes(self) -> None:
        """Stop every node gracefully: SIGTERM to all at once, SIGKILL after 10 s.

        Each node closes its ZooKeeper session on the way out, so one at a time
        took about 0.4 s a node.
        """
        with self.locked():
            stop_processes(
                [node.pid for node in self.nodes.values() if node.alive and node.pid]
            )
            for node in self.nodes.values():
                node.pid = None

    def stop(self) -> list[int]:
        """Stop everything the lab started; return the pids lab.json did not list.

        Storm (workers included), Spark, the nodes and ZooKeeper as lab.json
        lists them stop first (gracefully, in that order); then every other
        process still running from the lab dir (lab.json stale or edited) gets
        SIGTERM, then SIGKILL; last, a netns lab's hosts are removed.

        Raises:
            ConfigError: lab.json cannot be read (:func:`lab_processes` still
                finds what runs).
        """
        with self.locked():
            self.stop_storm()
            self.stop_spark()
            self.stop_kafka()
            self.stop_prometheus()
            self.stop_nodes()
            self.stop_zookeeper()
            leftovers = lab_processes(self.root)
            stop_lab_processes(self.root, leftovers)
            if self.netns is not None:
                lab_netns.teardown(self.root, self.netns)
                self.netns = None
        return leftovers

    def check_nodes(self, node_ids: list[str]) -> None:
        """Check that every id names a node of this lab.

        Raises:
            ConfigError: the first id that does not.
        """
        for node_id in node_ids:
            self._node(node_id)

    def _node(self, node_id: str) -> LabNode:
        if node_id not in self.nodes:
            known = ", ".join(sorted(self.nodes)) or "none"
            msg = f"no node {node_id!r} in the lab at {self.root} (nodes: {known})"
            raise ConfigError(msg)
        return self.nodes[node_id]
