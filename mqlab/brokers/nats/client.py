"""A NATS client of its own event loop, as the NATS driver, its senders and its receivers
use it, the profile's settings, and what they use of their driver (``NatsLink``)."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any, Protocol

import nats
import nats.errors
import nats.js.errors

from mqlab.errors import DriverError
from mqlab.typed import spec


@dataclass(frozen=True)
class NatsSettings:
    replicas: int = spec(3, min=1, max=5)
    storage: str = spec("file", choices=("file", "memory"))
    ack_wait_s: float = spec(30.0, min=0.5, help="visibility timeout before redelivery")
    ack_sync: bool = spec(
        True,
        help="the server confirms each ack (double ack); with prefetch 0 ack() waits for it, "
        "else up to 1024 confirmations are awaited at a time, and close() waits for all",
    )
    max_ack_pending: int = spec(100_000, min=1)
    prefetch: int = spec(
        256,
        min=0,
        max=65_536,
        help="messages per receiver delivered ahead of receive() into a local buffer "
        "(standing pull requests; at least the receive batch); 0: one fetch per receive() "
        "and ack() waits, the behaviour before prefetch",
    )
    publish_timeout_s: float = spec(10.0, min=0.1)
    connect_timeout_s: float = spec(5.0, min=0.1)


def servers(endpoints: Any) -> list[str]:
    return [f"nats://{n.host}:{n.port}" for n in endpoints.nodes]


class Client:
    def __init__(self, driver: NatsLink):
        self.driver = driver
        self.loop = asyncio.new_event_loop()
        s = driver.settings
        try:
            self.nc = self.run(
                nats.connect(
                    servers=servers(driver.endpoints),
                    connect_timeout=s.connect_timeout_s,
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=0.2,
                    allow_reconnect=True,
                    name=f"mqlab-{driver.queue}",
                )
            )
        except Exception as e:
            close_loop(self.loop)
            raise DriverError(
                f"nats: cannot connect to {', '.join(servers(driver.endpoints))}: {e}"
            ) from e
        self.js = self.nc.jetstream(timeout=s.publish_timeout_s)

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.run(self.nc.close())
        close_loop(self.loop)


def close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the client's leftover background tasks, then close the loop quietly."""
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    with contextlib.suppress(Exception):
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
    loop.close()


class NatsLink(Protocol):
    """What the client, senders and receivers use of their driver (``NatsDriver``)."""

    settings: Any
    endpoints: Any
    queue: str
    stream: str
    consumer: str
    subject: str
