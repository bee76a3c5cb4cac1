"""Star-structured recovery: R pulls every shard in parallel, one live holder each.

Each shard goes to its least-loaded live holder (by bytes assigned), so load is
spread over holders; R opens connections to all of them at once and receives the
shards with the nodes' ``get`` (sent with ``sendfile``), each straight into a
buffer of its own (:class:`~sr3.recovery.transport.ShardLink`), checking the
manifest's crc32 piece by piece as the bytes arrive. A holder that fails or
serves a corrupt copy is skipped and the shard is asked from its next holder,
least loaded first. The limit is R's
inbound link: every holder sends into it at once (incast).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from sr3.config import NodeConfig
from sr3.errors import ChecksumError, CodecError, ShardNotFoundError, StorageError
from sr3.manifest import ShardMeta
from sr3.recovery.base import RecoveryStrategy, TransferJob, assign_least_loaded
from sr3.recovery.transport import ShardLink

__all__ = ["StarRecovery"]

logger = logging.getLogger(__name__)


class StarRecovery(RecoveryStrategy):
    """Parallel fan-in of every shard straight to R (see module docs)."""

    name = "star"

    def transfer(self, job: TransferJob) -> None:
        """Fetch every shard of the job from one holder each, in parallel.

        A shard whose holders all failed stays missing in ``job.assembly``.
        """
        assigned, orphans = assign_least_loaded(job.shards, job.usable())
        for shard in orphans:
            logger.warning("star: shard %s has no live holder left", shard.shard_id)
        load = {node: sum(s.size for s in shards) for node, shards in assigned.items()}
        job.structure = {
            "nodes": sorted(assigned),
            "edges": [[node, "R"] for node in sorted(assigned)],
            "assignment": {n: [s.shard_id for s in v] for n, v in assigned.items()},
        }
        job.emit("plan", mechanism=self.name, structure=job.structure)
        work = [(node, shard) for node, shards in assigned.items() for shard in shards]
        # interleave holders so the first wave of requests spreads over all of them
        work.sort(key=lambda item: assigned[item[0]].index(item[1]))
        workers = max(1, min(self.context.parallel, len(work)))
        links = _Links(self.context.node_config)
        try:
            with ThreadPoolExecutor(workers, thread_name_prefix="sr3-star") as pool:
                futures = [
                    pool.submit(self._fetch, job, node, shard, load, links)
                    for node, shard in work
                ]
                for future in futures:
                    future.result()
        finally:
            links.close()

    def _fetch(
        self,
        job: TransferJob,
        first: str,
        shard: ShardMeta,
        load: dict[str, int],
        links: _Links,
    ) -> None:
        tried: set[str] = set()
        node_id: str | None = first
        while node_id is not None:
            tried.add(node_id)
            info = job.live[node_id]
            try:
                # the link checks the payload against the manifest's crc32 as it
                # arrives: end to end, in one pass
                data = links.get(node_id, info.host, info.port).get(
                    shard.shard_id, shard.size, shard.crc32
                )
                job.assembly.add_shard(shard.shard_id, data, crc_checked=True)
            except (ChecksumError, CodecError) as exc:
                logger.warning(
                    "star: corrupt copy of %s on %s: %s", shard.shard_id, node_id, exc
                )
                job.found_corrupt(node_id, shard.shard_id)
            except ShardNotFoundError as exc:
                logger.info("star: %s lacks %s: %s", node_id, shard.shard_id, exc)
            except StorageError as exc:
                logger.info("star: %s failed for %s: %s", node_id, shard.shard_id, exc)
                job.lost(node_id, str(exc))
            else:
                job.delivered(node_id, len(data))
                return
            usable = job.usable()
            others = [h for h in shard.holders if h in usable and h not in tried]
            node_id = min(others, key=lambda h: load.get(h, 0), default=None)
            if node_id is not None:
                load[node_id] = load.get(node_id, 0) + shard.size
        logger.warning("star: no holder served %s (tried %s)", shard.shard_id, tried)


class _Links:
    """One :class:`ShardLink` per (thread, node), closed together at the end."""

    def __init__(self, config: NodeConfig) -> None:
        self._config = config
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: list[ShardLink] = []

    def get(self, node_id: str, host: str, port: int) -> ShardLink:
        mine: dict[str, ShardLink] | None = getattr(self._local, "links", None)
        if mine is None:
            mine = self._local.links = {}
        link = mine.get(node_id)
        if link is None:
            link = mine[node_id] = ShardLink(host, port, config=self._config)
            with self._lock:
                self._all.append(link)
        return link

    def close(self) -> None:
        with self._lock:
            for link in self._all:
                link.close()
