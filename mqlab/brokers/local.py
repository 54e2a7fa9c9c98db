"""`mqlab cluster up|status|down BROKER`: named local clusters kept under the state dir."""

from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path
from typing import Any

from mqlab.brokers import registry
from mqlab.brokers.cluster import LocalCluster, Progress, _quiet
from mqlab.errors import ClusterError


def state_dir(root: Path | None = None) -> Path:
    """Where mqlab keeps local state: ``root``, else ``$MQLAB_STATE_DIR``, else ``./.mqlab``."""
    if root is not None:
        return Path(root).resolve()
    return Path(os.environ.get("MQLAB_STATE_DIR", ".mqlab")).resolve()


def cluster_class(broker: str) -> type[LocalCluster]:
    info = registry.BROKERS.get(broker)
    if info is None:
        raise ClusterError(
            f"unknown broker {broker!r} (one of: {', '.join(sorted(registry.BROKERS))})"
        )
    if info.local_cluster is None:
        with_local = sorted(b.name for b in registry.BROKERS.values() if b.local_cluster)
        raise ClusterError(
            f"broker {broker!r} has no local cluster (local: {', '.join(with_local)})"
        )
    module = importlib.import_module(f"mqlab.brokers.{info.local_cluster}.cluster")
    cls: type[LocalCluster] = module.CLUSTER
    return cls


def attach_class(broker: str) -> type[LocalCluster]:
    """The class that checks the nodes a lab's images run (``placement.brokers_from_image``):
    the broker's own launcher where it runs on hosts (NATS, PostgreSQL, Redis, RabbitMQ),
    else the attach path of ``mqlab.brokers.image`` (stand-ins and brokers without a
    launcher). A broker without an image (SQS) keeps its launcher, which says why not."""
    info = registry.BROKERS.get(broker)
    if info is not None and info.local_cluster is not None:
        cls = cluster_class(broker)
        if cls.runs_on_hosts or not info.self_hosted:
            return cls
    if info is None:
        cluster_class(broker)  # the one-line refusal of an unknown broker
    from mqlab.brokers import image

    return image.image_cluster(broker)


def named_dir(broker: str, root: Path | None = None) -> Path:
    return state_dir(root) / "clusters" / broker


def find_running(broker: str, root: Path | None = None) -> LocalCluster | None:
    """The cluster `mqlab cluster up BROKER` left running, if it is (still) up."""
    d = named_dir(broker, root)
    if not (d / "state.json").is_file():
        return None
    cluster = cluster_class(broker).load(d)
    return cluster if all(cluster.alive()) and cluster.procs else None


def up(
    broker: str,
    nodes: int | None = None,
    progress: Progress = _quiet,
    root: Path | None = None,
    server: dict[str, Any] | None = None,
) -> LocalCluster:
    """Start the named local cluster of ``broker``; ``server``: what its servers are started
    with (``LocalCluster.server_config`` of a profile's settings; the default layout when
    empty)."""
    cls = cluster_class(broker)
    d = named_dir(broker, root)
    if (d / "state.json").is_file():
        existing = cls.load(d)
        if any(existing.alive()):
            raise ClusterError(
                f"a local {broker} cluster is already up (state in {d}); "
                f"run `mqlab cluster down {broker}` first"
            )
        existing.stop()
    shutil.rmtree(d, ignore_errors=True)
    cluster = cls(d, nodes, server=server)
    cluster.start(progress)
    return cluster


def status(broker: str) -> dict[str, Any]:
    d = named_dir(broker)
    if not (d / "state.json").is_file():
        return {"broker": broker, "up": False}
    cluster = cluster_class(broker).load(d)
    health = cluster.health() if any(cluster.alive()) else {"healthy": False}
    return {
        "broker": broker,
        "up": any(cluster.alive()),
        "workdir": str(d),
        "endpoints": cluster.endpoints().to_json(),
        **health,
    }


def down(broker: str, root: Path | None = None) -> bool:
    """Stop the named cluster; False if none was recorded."""
    d = named_dir(broker, root)
    if not (d / "state.json").is_file():
        return False
    cluster_class(broker).load(d).stop()
    return True
