"""The RocketMQ client library (``rocketmq-python-client``): imported on first use, not
with the driver (at import it configures a logger writing to ~/logs/rocketmq_python/;
mqlab sends that logger's records to its own logging instead, warnings and worse), and
what the driver reads of its errors."""

from __future__ import annotations

import logging
import threading
from typing import Any

LOG = logging.getLogger(__name__)
CLIENT_LOGGER = "rocketmq-python-client"
#: the client's error when its cached route of the topic lists no queue to use: after the
#: group's leader changed, client 5.1.2 keeps that route until its own lookup (every 30 s)
NO_QUEUES = "no available message queues"
_import_lock = threading.Lock()
_client_module: Any = None


def client() -> Any:
    """The client library, imported once; its file logger replaced by mqlab's logging."""
    global _client_module
    with _import_lock:
        if _client_module is None:
            import rocketmq

            lg = logging.getLogger(CLIENT_LOGGER)
            for h in list(lg.handlers):
                lg.removeHandler(h)
                h.close()
            lg.setLevel(logging.WARNING)
            lg.propagate = True
            _client_module = rocketmq
    return _client_module


def describe(e: BaseException) -> str:
    """An exception of the client library in one line: its class and message."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")


def shutdown(c: Any) -> None:
    """A producer or consumer shut down; a failure to is logged (closing: nothing left
    to do about it)."""
    try:
        c.shutdown()
    except Exception as e:  # noqa: BLE001
        LOG.debug("rocketmq: shutdown: %s", describe(e))
