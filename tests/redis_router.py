"""`memfleet route` in front of a learned Redis pool (a Redis Cluster's or a Sentinel-named
primary, tests/redis_cluster.py), for the cluster and Sentinel tests: one pool, its stats port
and /metrics."""

from __future__ import annotations

import re
import urllib.request

import proxy_harness
from harness import free_port


def learned_pool_yaml(name: str, port: int, seeds: list[str], **opts: object) -> str:
    """A Redis pool on `port` whose servers are `seeds` (cluster nodes or Sentinels: the
    topology is in `opts`, `redis_cluster=True` or `redis_sentinel=NAME`)."""
    return proxy_harness.pool_yaml(
        name,
        f"127.0.0.1:{port}",
        [f"{s}:1" for s in seeds],
        redis=True,
        timeout=2000,
        **opts,
    )


class Router(proxy_harness.Proxy):
    """The router with its stats port and /metrics on free ports."""

    def __init__(self, conf: str, port: int) -> None:
        self.metrics_port = free_port()
        super().__init__(conf, port, extra=["--metrics", f"127.0.0.1:{self.metrics_port}"])

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            return str(r.read().decode())

    def metric(self, name: str, **labels: str) -> int | None:
        """The value of sample `name` with exactly `labels`, None when there is none."""
        want = ",".join(f'{k}="{v}"' for k, v in labels.items())
        pattern = rf"^{re.escape(name)}\{{{re.escape(want)}\}} (\S+)$"
        found = re.search(pattern, self.metrics(), re.MULTILINE)
        return int(float(found.group(1))) if found else None


def start_router(name: str, seeds: list[str], **opts: object) -> Router:
    """A router for one learned pool `name` (see `learned_pool_yaml`), started."""
    port = free_port()
    router = Router(learned_pool_yaml(name, port, seeds, **opts), port)
    router.start()
    return router
