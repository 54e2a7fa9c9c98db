"""Which RocketMQ broker layout a profile's settings ask for, and what that layout writes
into the name server's and the brokers' configuration (stdlib only).

- ``replication = "quorum"`` (the default): one broker group whose commit log is one
  DLedger (Raft) group; a send is answered once a majority (2 of 3) appended it. DLedger
  flushes on its own timer and ignores ``flushDiskType``: ``flush`` must stay "async".
  The lab images run this layout too (``node.py``).
- ``"all_in_sync"`` and ``"async"``: controller mode. A controller, embedded in the name
  server (a one-peer DLedger group of its own), elects the group's master among the
  brokers of its SyncStateSet (the replicas that have caught up) and hands out broker ids
  (``brokerId=-1``). The master's role is always SYNC_MASTER in this mode; what a send
  waits for is ``allAckInSyncStateSet`` (true: every replica of the SyncStateSet has the
  message) or, when false, ``inSyncReplicas`` (1: the master alone, the replicas copy it
  later: asynchronous). Read in apache/rocketmq's 5.x sources (``CommitLog.asyncPutMessage``
  and ``handleHA``: an ack count of 0 or 1 is answered at once; ``MessageStoreConfig``),
  and tried with 5.4.0 on this machine (docs/brokers.md).
- ``flush = "sync"`` (controller mode only): ``flushDiskType=SYNC_FLUSH``, the master
  answers only once the message is on its disk (its group commit); "async": the OS
  writes it out later. A broker reads this at its start only (it picks its flush service
  then): a cluster started for one value serves no profile with the other.
"""

from __future__ import annotations

from typing import Any

REPLICATIONS = ("quorum", "all_in_sync", "async")
FLUSHES = ("async", "sync")
CONTROLLER_GROUP = "mqlab-controller"
# the controllers' DLedger port on a lab's hosts (RocketMQ's docs use 9878); not among the
# descriptor's standard ports, which are the images' (they run the DLedger layout)
CONTROLLER_PORT = 9878


def server_config(replication: str, flush: str) -> dict[str, str]:
    """What the servers must be started with: empty for the default layout (DLedger, the
    one every launcher and image of RocketMQ runs), else the layout's two choices."""
    if replication == "quorum":
        return {}
    return {"replication": replication, "flush": flush}


def controller_mode(server: dict[str, Any]) -> bool:
    return server.get("replication") in ("all_in_sync", "async")


def broker_settings(server: dict[str, Any]) -> dict[str, Any]:
    """The broker.conf keys of a controller-mode layout (replication and flush)."""
    all_in_sync = server["replication"] == "all_in_sync"
    return {
        "enableControllerMode": True,
        "brokerId": -1,  # the controller hands out the ids
        "brokerRole": "SLAVE",  # until the controller elects it master
        "allAckInSyncStateSet": all_in_sync,
        # without allAckInSyncStateSet, how many replicas (the master counting) a send
        # waits for: 1, the master alone
        "inSyncReplicas": 1,
        # a send is refused (IN_SYNC_REPLICAS_NOT_ENOUGH) while fewer replicas than this,
        # the master counting, are in sync: 2 when every in-sync replica must have it (as
        # Kafka's min.insync.replicas 2 and DLedger's majority: never the master alone), 1
        # for the asynchronous layout, whose master takes writes alone anyway
        "minInSyncReplicas": 2 if all_in_sync else 1,
        "flushDiskType": "SYNC_FLUSH" if server["flush"] == "sync" else "ASYNC_FLUSH",
    }


def namesrv_settings(peers: list[str], index: int, store: str) -> dict[str, Any]:
    """Name server ``index``'s keys that embed a controller: one peer (``c<index>``) of the
    controllers' own DLedger group, whose peers are ``peers`` (``host:port`` each)."""
    return {
        "enableControllerInNamesrv": True,
        "controllerDLegerGroup": CONTROLLER_GROUP,
        "controllerDLegerPeers": ";".join(f"c{i}-{p}" for i, p in enumerate(peers)),
        "controllerDLegerSelfId": f"c{index}",
        "controllerStorePath": store,
    }
