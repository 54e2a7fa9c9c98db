"""The health probe of a local Artemis cluster: one persistent message sent with a receipt,
read back through a selector that picks it out, and acked with a receipt."""

from __future__ import annotations

import threading
import time
from typing import Any

from mqlab.brokers.artemis.wire import destination, send_headers


def probe(driver: Any, token: str) -> tuple[bool, str]:
    """(served, why not) for ``driver``'s first node and queue."""
    s = driver.settings
    cond = threading.Condition()
    got: list[Any] = []

    def arrived(frames: list[Any]) -> None:
        with cond:
            got.extend(frames)
            cond.notify_all()

    link = driver.connect(cond, arrived)
    dest = destination(driver.queue, link.artemis)
    try:
        body = token.encode()
        rid = link.receipt_id()
        headers = {**send_headers(link.artemis), "mqlab_probe": token, "receipt": rid}
        link.frame(lambda: link.conn.send(dest, body, headers=headers), "probe send")
        link.wait([rid], s.receipt_timeout_s, "probe send")
        rid = link.receipt_id()
        sub = {"selector": f"mqlab_probe = '{token}'", "receipt": rid}
        if link.artemis:
            sub["subscription-type"] = "ANYCAST"
        link.frame(
            lambda: link.conn.subscribe(dest, id="probe", ack="client-individual", headers=sub),
            "probe subscribe",
        )
        link.wait([rid], s.receipt_timeout_s, "probe subscribe")
        deadline = time.monotonic() + s.receipt_timeout_s
        with cond:
            while not got and not link.lost and time.monotonic() < deadline:
                cond.wait(max(0.0, deadline - time.monotonic()))
        if not got:
            return False, "the probe did not come back"
        frame = got[0]
        rid = link.receipt_id()
        link.frame(lambda: link.conn.ack_many([frame.headers["ack"]], rid), "probe ack")
        link.wait([rid], s.receipt_timeout_s, "probe ack")
        if bytes(frame.body) != body:
            return False, "the probe came back changed"
        return True, "ok"
    finally:
        link.close()
