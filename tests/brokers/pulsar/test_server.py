"""Pulsar only, on the local stand-in (pulsar-lite): what the contract suite does not reach.

A live receiver's unacked message comes again after the client's ack timeout; a send
that the server does not confirm fails after ``send_timeout_s``; receivers whose clients
all ask for the same consumer id still subscribe (pulsar-lite refuses an id in use).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mqlab import envelope
from mqlab.brokers.base import Delivery
from mqlab.brokers.pulsar import driver as pd
from mqlab.brokers.pulsar.cluster import PulsarCluster
from mqlab.errors import DriverError
from tests.brokers.conftest import driver_on
from tests.brokers.test_contract import _messages
from tests.conftest import SharedLab

pytestmark = pytest.mark.integration


@pytest.fixture
def driver(shared_lab: SharedLab) -> Iterator[pd.PulsarDriver]:
    with driver_on(shared_lab, "pulsar", "pulsar") as d:
        yield d


def _seqs(deliveries: list[Delivery]) -> list[int]:
    return sorted(envelope.decode(d.payload)[1] for d in deliveries)


def test_an_unacked_message_of_a_live_receiver_comes_again_after_the_ack_timeout(
    driver: pd.PulsarDriver,
) -> None:
    s, r = driver.sender(), driver.receiver()
    try:
        s.send(_messages(3))
        first: list[Delivery] = []
        while len(first) < 3:
            first += r.receive(10, 1.0)
        r.ack([d for d in first if envelope.decode(d.payload)[1] != 1])  # 1 stays unacked
        start = time.monotonic()
        assert r.receive(10, 0.5) == []  # hidden while the ack timeout runs
        again = r.receive(10, driver.redelivery_timeout_s + 5)  # the receiver stays open
        took = time.monotonic() - start
        assert _seqs(again) == [1] and again[0].redelivered
        assert took >= driver.redelivery_timeout_s - 1, took
        r.ack(again)
        assert driver.remaining().count == 0
    finally:
        s.close()
        r.close()


def test_receivers_asking_for_the_same_consumer_id_all_subscribe(
    driver: pd.PulsarDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every receiver's client starts at consumer id 0: pulsar-lite refuses the second one
    until it tries again with the next id; all three then share the messages."""
    monkeypatch.setattr(pd, "STANDIN_ID_SPREAD", 1)  # no random start: id 0 each time
    driver.settings = pd.Settings(
        ensemble_size=1, write_quorum=1, ack_quorum=1, prefetch=4, operation_timeout_s=1
    )
    s = driver.sender()
    receivers = [driver.receiver() for _ in range(3)]
    try:
        s.send(_messages(30))
        got: list[Delivery] = []
        per = [0, 0, 0]
        deadline = time.monotonic() + 30
        while len(got) < 30 and time.monotonic() < deadline:
            for i, r in enumerate(receivers):
                batch = r.receive(2, 0.1)
                r.ack(batch)
                got += batch
                per[i] += len(batch)
        assert _seqs(got) == list(range(30))
        assert all(per), per  # each receiver got some: all three are subscribed
    finally:
        s.close()
        for r in receivers:
            r.close()


def test_a_send_the_server_does_not_confirm_fails_after_the_send_timeout(tmp_path: Path) -> None:
    c = PulsarCluster(tmp_path / "cluster")
    c.start()
    try:
        s = pd.Settings(
            ensemble_size=1, write_quorum=1, ack_quorum=1, send_timeout_s=2, operation_timeout_s=5
        )
        driver = pd.PulsarDriver(s, c.endpoints(), "unconfirmed")
        driver.setup()
        sender = driver.sender()
        sender.send(_messages(2))
        c.pause_node(0)  # stalled: nothing is confirmed
        try:
            start = time.monotonic()
            with pytest.raises(DriverError, match="unconfirmed|failed"):
                sender.send(_messages(3))
            assert time.monotonic() - start < 10
        finally:
            c.resume_node(0)
        sender.close()
    finally:
        c.stop()
