"""Serving a registry of :mod:`sr3.metrics` to Prometheus.

:func:`serve` runs an HTTP endpoint on a thread (port 0: a free one);
:class:`RunPublisher` serves a topology run's metrics while it runs, feeding
them from the engine's counts, and lists the endpoint in a lab's Prometheus
targets (:func:`write_target`, file_sd), waiting for a last scrape when the run
ends so its final values are read.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from sr3.config_engine import MetricsConfig
from sr3.errors import ConfigError
from sr3.metrics import RunMetrics

__all__ = [
    "E_PORT",
    "FEED_INTERVAL_S",
    "FINAL_SCRAPE_S",
    "SCRAPED_MARKER",
    "Endpoint",
    "RunPublisher",
    "serve",
    "write_target",
]

E_PORT = (
    "cannot serve metrics on 127.0.0.1:{port} ({exc}); set sr3.metrics.port "
    "(SR3_METRICS_PORT) to a free port, or 0 to pick one, or "
    "sr3.metrics.enabled=false"
)

#: How often a run's feed copies the engine's counts into its metrics.
FEED_INTERVAL_S: Final = 0.5
#: How long a run's endpoint waits, when it ends, for the scrape that reads its
#: final values (a lab's Prometheus scrapes every second).
FINAL_SCRAPE_S: Final = 3.0
#: A file a targets dir holds while a Prometheus reads it: a lab writes it when
#: its Prometheus starts and removes it when it stops. Without it nobody
#: scrapes the dir's targets, and a run's end waits for no final scrape.
SCRAPED_MARKER: Final = "scraped-by-prometheus"


#: How often the serving thread looks for a close: socketserver's default
#: (0.5 s) was added, up to that, to every ring node's stop and run's end.
_SHUTDOWN_POLL_S: Final = 0.1


class _QuietHandler(WSGIRequestHandler):
    """Serves a scrape and logs nothing for it (as prometheus_client's handler)."""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base method's name)
        """Log nothing."""


class _Scrapes:
    """A collector that yields nothing and counts the scrapes that read it."""

    def __init__(self) -> None:
        self._done = threading.Condition()
        self.count = 0

    def describe(self) -> list[object]:
        return []

    def collect(self) -> list[object]:
        with self._done:
            self.count += 1
            self._done.notify_all()
        return []

    def wait_after(self, seen: int, timeout_s: float) -> bool:
        """Wait for a scrape after the ``seen``-th; whether one came in time."""
        with self._done:
            return self._done.wait_for(lambda: self.count > seen, timeout_s)


@dataclass
class Endpoint:
    """A running metrics endpoint; :meth:`close` stops it.

    Attributes:
        url: Where Prometheus scrapes it (``http://127.0.0.1:PORT/metrics``).
    """

    url: str
    _server: WSGIServer
    _thread: threading.Thread
    _scrapes: _Scrapes = field(default_factory=_Scrapes)

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self._server.server_port)

    def close(self, *, final_scrape_s: float = 0.0) -> None:
        """Stop serving and release the port.

        Args:
            final_scrape_s: First wait up to this long for one more scrape, so
                a Prometheus that scrapes the endpoint reads the values set
                just before (a run's last checkpoint and counts).
        """
        if final_scrape_s > 0:
            self._scrapes.wait_after(self._scrapes.count, final_scrape_s)
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve(
    registry: CollectorRegistry, *, port: int = 0, host: str = "127.0.0.1"
) -> Endpoint:
    """Serve ``registry`` on ``host``:``port`` (0: a free port) in a thread.

    ``host`` is loopback unless the process has an address of its own (a ring
    node on a host of the netns lab serves on that host's address).

    Raises:
        ConfigError: the port cannot be bound (taken: give another, or 0).
    """
    scrapes = _Scrapes()
    # prometheus_client types a collector as its own Collector ABC; _Scrapes
    # has the two methods a registry calls, without the ABC's metric types
    registry.register(scrapes)  # type: ignore[arg-type]
    try:
        # IPv4 (ThreadingWSGIServer's family): loopback or a netns host's address
        server = make_server(
            host,
            port,
            make_wsgi_app(registry),
            ThreadingWSGIServer,
            handler_class=_QuietHandler,
        )
    except OSError as exc:
        registry.unregister(scrapes)  # type: ignore[arg-type]
        msg = E_PORT.format(port=port, exc=exc)
        raise ConfigError(msg) from exc
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": _SHUTDOWN_POLL_S},
        name="sr3-metrics-endpoint",
        daemon=True,
    )
    thread.start()
    url = f"http://{host}:{server.server_port}/metrics"
    return Endpoint(url, server, thread, scrapes)


class RunPublisher:
    """Serves a run's metrics while it runs, fed every :data:`FEED_INTERVAL_S`.

    The engines' feeds (the local cluster's, Spark's driver's) give their
    ``feed`` (quick, never raising); this serves the registry when
    ``sr3.metrics.enabled``, lists the endpoint in a lab's Prometheus targets,
    feeds on a thread, and on :meth:`close` feeds once more and, when a
    Prometheus reads the targets (:data:`SCRAPED_MARKER`), waits for the scrape
    that reads those final values before the endpoint and target go.

    Args:
        metrics: The run's metrics.
        config: ``sr3.metrics.*``: whether and where to serve.
        targets_dir: The lab's targets dir (None: no lab, nothing listed).
        feed: Copies the engine's counts into ``metrics``.
        name: The feeding thread's name.
    """

    def __init__(
        self,
        metrics: RunMetrics,
        config: MetricsConfig,
        targets_dir: Path | None,
        feed: Callable[[], None],
        name: str,
    ) -> None:
        self._metrics = metrics
        self._config = config
        self._targets_dir = targets_dir
        self._feed = feed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.endpoint: Endpoint | None = None
        self._target: Path | None = None

    def start(self) -> Endpoint | None:
        """Serve and start feeding; return the endpoint (None: disabled).

        Raises:
            ConfigError: ``sr3.metrics.port`` cannot be bound.
        """
        if not self._config.enabled:
            return None
        self.endpoint = serve(self._metrics.registry, port=self._config.port)
        if self._targets_dir is not None:
            self._target = write_target(
                self._targets_dir, self._metrics.topology, self.endpoint
            )
        self._thread.start()
        return self.endpoint

    def close(self) -> None:
        """Feed once more, stop serving, remove the target."""
        if self.endpoint is None:
            return
        self._stop.set()
        self._thread.join(timeout=5)
        if self._target is not None:
            # a lab's Prometheus reads the final values before the target goes
            scraped = self._target.with_name(SCRAPED_MARKER).exists()
            self.endpoint.close(final_scrape_s=FINAL_SCRAPE_S if scraped else 0.0)
            self._target.unlink(missing_ok=True)
        else:
            self.endpoint.close()

    def _run(self) -> None:
        while not self._stop.wait(FEED_INTERVAL_S):
            self._feed()
        self._feed()


def write_target(targets_dir: Path, name: str, endpoint: Endpoint) -> Path:
    """List ``endpoint`` in ``targets_dir`` as Prometheus file_sd; return the file.

    The file is ``run-<name>-<pid>.json``; the caller removes it when it stops
    serving. No target labels: every series carries its own.
    """
    targets_dir.mkdir(parents=True, exist_ok=True)
    path = targets_dir / f"run-{name}-{os.getpid()}.json"
    host_port = endpoint.url.split("/")[2]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([{"targets": [host_port]}]), encoding="utf-8")
    tmp.replace(path)  # Prometheus never reads half a file
    return path
