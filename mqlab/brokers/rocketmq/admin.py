"""RocketMQ's remoting protocol, only as far as the RocketMQ driver needs it: create a
topic, ask a name server whether it routes one, delete it.

Why a second protocol: the 5.x gRPC client (``rocketmq-python-client``) has no admin
calls, and the gRPC proxy does not create a topic on first use (apache/rocketmq#6540:
auto-creation through the proxy is not implemented, by design). ``mqadmin updateTopic``
sends these same requests.

A frame is ``int32 length`` (of all that follows), ``int32`` whose high byte is the
header's serialization (0: JSON) and whose low three bytes are the header's length, the
header (a JSON RemotingCommand: code, language, version, opaque, flag, extFields), then
the body. A response has bit 0 of ``flag`` set and the request's ``opaque``; its ``code``
0 is success, ``remark`` says why not. Request codes and header fields as in RocketMQ's
RequestCode and CreateTopicRequestHeader (5.x).

Stdlib only; one short TCP connection per request.
"""

from __future__ import annotations

import itertools
import json
import re
import socket
import struct
from dataclasses import dataclass
from typing import Any

from mqlab.errors import DriverError

UPDATE_AND_CREATE_TOPIC = 17
GET_ROUTEINFO_BY_TOPIC = 105
DELETE_TOPIC_IN_BROKER = 215
DELETE_TOPIC_IN_NAMESRV = 216
GET_BROKER_RUNTIME_INFO = 28
GET_BROKER_CLUSTER_INFO = 106
GET_CONSUME_STATS = 208
GET_TOPIC_CONFIG = 351
GET_BROKER_CONFIG = 26
CONTROLLER_GET_SYNC_STATE_DATA = 1006  # asked of a controller (controller mode)
SUCCESS = 0
TOPIC_NOT_EXIST = 17  # a response code (not the request code of the same number)
RESPONSE_FLAG = 1
JSON_SERIALIZATION = 0
MAX_FRAME = 16 * 1024 * 1024
PERM_READ_WRITE = 4 | 2  # PermName.PERM_READ | PermName.PERM_WRITE
DEFAULT_TOPIC = "TBW102"  # the template topic every broker knows

_opaque = itertools.count(1)


@dataclass(frozen=True)
class Reply:
    code: int
    remark: str
    opaque: int
    flag: int
    body: bytes


def encode(
    code: int, ext: dict[str, str], opaque: int, body: bytes = b"", version: int = 0
) -> bytes:
    """One request frame (``version``: the client's MQVersion ordinal; 0 for admin calls,
    whose answers are read with bare integer map keys quoted, ``loads``)."""
    header = json.dumps(
        {
            "code": code,
            "language": "PYTHON",
            "version": version,
            "opaque": opaque,
            "flag": 0,
            "extFields": ext,
            "serializeTypeCurrentRPC": "JSON",
        },
        separators=(",", ":"),
    ).encode()
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


def decode(frame: bytes) -> Reply:
    """A frame without its leading length field."""
    if len(frame) < 4:
        raise DriverError(f"rocketmq admin: frame of {len(frame)} bytes, no header length")
    (mark,) = struct.unpack(">i", frame[:4])
    kind, size = (mark >> 24) & 0xFF, mark & 0xFFFFFF
    if kind != JSON_SERIALIZATION:
        raise DriverError(f"rocketmq admin: header serialized as type {kind}, not JSON")
    if 4 + size > len(frame):
        raise DriverError(f"rocketmq admin: header of {size} bytes in a {len(frame)}-byte frame")
    try:
        header: dict[str, Any] = json.loads(frame[4 : 4 + size])
    except ValueError as e:
        raise DriverError(f"rocketmq admin: unreadable header: {e}") from None
    return Reply(
        code=int(header.get("code", -1)),
        remark=str(header.get("remark") or ""),
        opaque=int(header.get("opaque", -1)),
        flag=int(header.get("flag", 0)),
        body=frame[4 + size :],
    )


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 65536))
        if not chunk:
            raise DriverError(f"rocketmq admin: connection closed after {got} of {n} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def exchange(sock: socket.socket, code: int, ext: dict[str, str], body: bytes = b"") -> Reply:
    """Send one request on ``sock`` and read its response."""
    opaque = next(_opaque)
    sock.sendall(encode(code, ext, opaque, body))
    (length,) = struct.unpack(">i", _read_exactly(sock, 4))
    if not 4 <= length <= MAX_FRAME:
        raise DriverError(f"rocketmq admin: frame length {length} out of range")
    reply = decode(_read_exactly(sock, length))
    if not reply.flag & RESPONSE_FLAG or reply.opaque != opaque:
        raise DriverError(
            f"rocketmq admin: expected the response to request {opaque}, "
            f"got flag {reply.flag} opaque {reply.opaque}"
        )
    return reply


def call(
    address: tuple[str, int], code: int, ext: dict[str, str], timeout_s: float, body: bytes = b""
) -> Reply:
    """One request to ``address`` (host, port) on a connection of its own."""
    try:
        with socket.create_connection(address, timeout=timeout_s) as sock:
            return exchange(sock, code, ext, body)
    except OSError as e:
        raise DriverError(f"rocketmq admin: {address[0]}:{address[1]}: {e}") from e


def _check(reply: Reply, what: str, address: tuple[str, int]) -> None:
    if reply.code != SUCCESS:
        raise DriverError(
            f"rocketmq admin: {what} refused by {address[0]}:{address[1]} "
            f"(code {reply.code}: {reply.remark})"
        )


def create_topic_request(topic: str, queues: int) -> dict[str, str]:
    """UPDATE_AND_CREATE_TOPIC's header: ``queues`` read and write queues, readable and
    writable, normal (not ordered) messages only."""
    return {
        "topic": topic,
        "defaultTopic": DEFAULT_TOPIC,
        "readQueueNums": str(queues),
        "writeQueueNums": str(queues),
        "perm": str(PERM_READ_WRITE),
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": "0",
        "order": "false",
        "attributes": "+message.type=NORMAL",
    }


def create_topic(broker: tuple[str, int], topic: str, queues: int, timeout_s: float) -> None:
    reply = call(broker, UPDATE_AND_CREATE_TOPIC, create_topic_request(topic, queues), timeout_s)
    _check(reply, f"creating topic {topic}", broker)


def _known(address: tuple[str, int], code: int, topic: str, what: str, t: float) -> bool:
    """Whether ``address`` answers request ``code`` about ``topic`` (False: it answers
    TOPIC_NOT_EXIST; any other refusal raises DriverError)."""
    reply = call(address, code, {"topic": topic}, t)
    if reply.code == TOPIC_NOT_EXIST:
        return False
    _check(reply, what, address)
    return True


def has_topic(broker: tuple[str, int], topic: str, timeout_s: float) -> bool:
    """Whether the broker holds ``topic`` in its topic table."""
    return _known(broker, GET_TOPIC_CONFIG, topic, f"topic {topic}", timeout_s)


def topic_routed(namesrv: tuple[str, int], topic: str, timeout_s: float) -> bool:
    """Whether the name server has a route for ``topic`` (a broker registered it)."""
    return _known(namesrv, GET_ROUTEINFO_BY_TOPIC, topic, f"the route of {topic}", timeout_s)


def delete_topic(broker: tuple[str, int], topic: str, timeout_s: float) -> None:
    _check(call(broker, DELETE_TOPIC_IN_BROKER, {"topic": topic}, timeout_s), "delete", broker)


def delete_route(namesrv: tuple[str, int], topic: str, timeout_s: float) -> None:
    reply = call(namesrv, DELETE_TOPIC_IN_NAMESRV, {"topic": topic}, timeout_s)
    _check(reply, f"deleting the route of {topic}", namesrv)


# RocketMQ's JSON bodies may key maps by bare integers (``{0:"host:port"}``): quoted here
_BARE_INT_KEY = re.compile(r"([{,])(-?\d+):")


def loads(body: bytes) -> Any:
    """A remoting body as JSON, its bare integer map keys quoted first."""
    try:
        return json.loads(_BARE_INT_KEY.sub(r'\1"\2":', body.decode()))
    except ValueError as e:
        raise DriverError(f"rocketmq admin: unreadable body: {e}") from None


def cluster_info(namesrv: tuple[str, int], timeout_s: float) -> dict[str, dict[int, str]]:
    """Every broker group the name server knows: group name -> broker id -> address.
    Broker id 0 is the group's master (with DLedger: the Raft leader)."""
    reply = call(namesrv, GET_BROKER_CLUSTER_INFO, {}, timeout_s)
    _check(reply, "the cluster info", namesrv)
    table = loads(reply.body).get("brokerAddrTable") or {}
    return {
        str(name): {int(k): str(v) for k, v in (g.get("brokerAddrs") or {}).items()}
        for name, g in table.items()
    }


def master_address(namesrvs: list[tuple[str, int]], timeout_s: float) -> str | None:
    """The ``host:port`` of a broker group's master (broker id 0) as the first name server
    that answers lists it; None while none lists one (an election) or none answers."""
    for ns in namesrvs:
        try:
            groups = cluster_info(ns, timeout_s)
        except DriverError:
            continue
        for addrs in groups.values():
            if 0 in addrs:
                return addrs[0]
    return None


def runtime_info(broker: tuple[str, int], timeout_s: float) -> dict[str, str]:
    """A broker's runtime figures (``commitLogMaxOffset``, ``brokerVersionDesc``, ...)."""
    reply = call(broker, GET_BROKER_RUNTIME_INFO, {}, timeout_s)
    _check(reply, "the runtime info", broker)
    table = loads(reply.body).get("table") or {}
    return {str(k): str(v) for k, v in table.items()}


def broker_config(broker: tuple[str, int], timeout_s: float) -> dict[str, str]:
    """The configuration a broker runs with (its properties, as it reads them at start
    and after updates): ``flushDiskType``, ``brokerRole``, ``allAckInSyncStateSet``..."""
    reply = call(broker, GET_BROKER_CONFIG, {}, timeout_s)
    _check(reply, "the broker config", broker)
    out = {}
    for line in reply.body.decode(errors="replace").splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def sync_state(controller: tuple[str, int], group: str, timeout_s: float) -> dict[str, Any]:
    """What a controller (controller mode) holds of broker group ``group``: its master's
    address and epoch, and the addresses of its in-sync replicas (the SyncStateSet, the
    master among them) and of the others, each alive or not."""
    body = json.dumps([group]).encode()
    reply = call(controller, CONTROLLER_GET_SYNC_STATE_DATA, {}, timeout_s, body)
    _check(reply, "the sync state data", controller)
    info = (loads(reply.body).get("replicasInfoTable") or {}).get(group) or {}

    def addresses(key: str) -> list[dict[str, Any]]:
        return [
            {"address": str(r.get("brokerAddress")), "alive": bool(r.get("alive"))}
            for r in info.get(key) or []
        ]

    return {
        "master": info.get("masterAddress"),
        "master_epoch": info.get("masterEpoch"),
        "in_sync": addresses("inSyncReplicas"),
        "not_in_sync": addresses("notInSyncReplicas"),
    }


# ConsumeStats' offsetTable keys its entries by objects (``{"brokerName":..,"queueId":..,
# "topic":..}:{"brokerOffset":..,...}``), which JSON cannot: each key and value read alone
_QUEUE_ENTRY = re.compile(r"(\{[^{}]*\}):(\{[^{}]*\})")


def consume_stats(
    broker: tuple[str, int], group: str, topic: str, timeout_s: float, *, pulled: bool = False
) -> dict[int, tuple[int, int]]:
    """``group``'s position in ``topic`` on ``broker``: queue id -> (the queue's end
    offset, the group's offset in it). A pop consumer's offset moves when it pops, so
    ``end - offset`` counts the messages no one took yet. ``pulled``: the offset up to which
    the group's pulls (or pops) took messages (``pullOffset``, moved at each pull) instead
    of the offset it committed (a push consumer commits every few seconds)."""
    reply = call(broker, GET_CONSUME_STATS, {"consumerGroup": group, "topic": topic}, timeout_s)
    _check(reply, f"the consume stats of {group} in {topic}", broker)
    out = {}
    for key, value in _QUEUE_ENTRY.findall(reply.body.decode()):
        try:
            queue, offsets = json.loads(key), json.loads(value)
        except ValueError as e:
            raise DriverError(f"rocketmq admin: unreadable consume stats: {e}") from None
        if queue.get("topic") == topic:
            at_key = "pullOffset" if pulled else "consumerOffset"
            end, at = int(offsets["brokerOffset"]), int(offsets[at_key])
            out[int(queue["queueId"])] = (end, max(at, 0))
    return out
