"""A master demoted while its connection still works (``direct.MasterWatch``,
``MasterLink.stale``): a DLedger leader cut off from the other brokers answers pops as a
follower, the same messages each time (seen on a netns lab, 2026-11-30: 638,906
duplicates of 10,350 messages, 10,254 never drained). Senders and receivers leave it
once the name servers list another master after their connection was made. The brokers
here are the test's sockets (``test_remoting.Peer``); the name servers' answers are
set by the test. The real layouts' faults are ``test_faults.py`` and ``test_controller.py``.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from mqlab.brokers.rocketmq import direct
from tests.brokers.rocketmq.test_remoting import Peer, fake_driver, read_all, response

NAMESRVS = [("127.0.0.1", 1)]


@pytest.fixture
def peers() -> Any:
    ps = [Peer(), Peer()]
    yield ps
    for p in ps:
        p.close()


def serve(peer: Peer, answers: int, seen: list[str], name: str, code: int = 0) -> threading.Thread:
    """``peer`` accepts one connection and answers its first ``answers`` requests with
    ``code``."""

    def run() -> None:
        c = peer.accept()
        for _ in range(answers):
            ((_, op, _, _),) = read_all(c, 1)
            seen.append(name)
            c.sendall(response(op, code))

    th = threading.Thread(target=run)
    th.start()
    return th


def test_a_sender_leaves_a_master_the_name_servers_no_longer_list(
    peers: list[Peer], monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = peers
    listed = [old.address]
    monkeypatch.setattr(direct, "find_master", lambda ns, t: ("grp-a", listed[0]))
    monkeypatch.setattr(direct.MasterWatch, "ask", staticmethod(lambda ns, t: None))
    seen: list[str] = []
    threads = [serve(old, 2, seen, "old"), serve(new, 1, seen, "new")]
    s = direct.DirectSender(fake_driver(send_timeout_s=5.0), NAMESRVS)
    s.send([b"a"])
    watch = s.link.watch
    assert watch is not None and watch.users >= 1
    # the name servers heard from before the connection was made: no matter
    watch.heard = (s.link.connected_at - 1.0, "grp-a", new.address)
    s.send([b"b"])
    # heard after it, the same master: it stays
    watch.heard = (time.monotonic(), "grp-a", old.address)
    assert not s.link.stale()
    # heard after it, another master: the next send goes there (no lookup of its own: the
    # lookup would still find the old one), the old connection closed
    watch.heard = (time.monotonic(), "grp-b", new.address)
    s.send([b"c"])
    for th in threads:
        th.join(5)
    assert seen == ["old", "old", "new"]
    assert s.link.address == new.address and s.link.broker_name == "grp-b"
    s.close()
    assert s.link.watch is None


def test_a_receiver_leaves_a_demoted_master_and_fails_the_acks_written_to_it(
    peers: list[Peer], monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = peers
    monkeypatch.setattr(direct, "find_master", lambda ns, t: ("grp-a", old.address))
    monkeypatch.setattr(direct.MasterWatch, "ask", staticmethod(lambda ns, t: None))
    r = direct.DirectReceiver(fake_driver(), NAMESRVS)
    r.link.conn = direct.remoting.Connection(old.address, 5)
    r.link.address, r.link.connected_at = old.address, time.monotonic()
    r.written = {7: 32}  # a batch ack written to the old master, not answered yet
    assert not r.link.stale()
    assert r.link.watch is not None
    r.link.watch.heard = (time.monotonic(), "grp-b", new.address)
    seen: list[str] = []
    th = serve(new, 1, seen, "new", direct.remoting.PULL_NOT_FOUND)
    assert r.receive(10, 0.1) == []  # its pop went to the new master (answered: nothing)
    th.join(5)
    assert seen == ["new"] and r.link.address == new.address
    assert r.written == {} and r.failed == ["32: its broker is no longer the master"]
    r.close()


def test_one_watch_per_name_servers_asks_while_used_and_stops_when_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked = threading.Event()
    answers = iter([None, ("grp-a", ("10.0.0.1", 10911))])

    def ask(ns: Any, t: float) -> Any:
        asked.set()
        return next(answers, ("grp-a", ("10.0.0.2", 10911)))

    monkeypatch.setattr(direct.MasterWatch, "ask", staticmethod(ask))
    monkeypatch.setattr(direct, "WATCH_EVERY_S", 0.05)
    namesrvs = [("127.0.0.1", 2)]
    a = direct.MasterWatch.join(namesrvs, 1.0)
    b = direct.MasterWatch.join(namesrvs, 1.0)
    assert a is b and a.users == 2
    deadline = time.monotonic() + 5
    while (a.heard is None or a.heard[2] != ("10.0.0.2", 10911)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert asked.is_set() and a.heard is not None and a.heard[1:] == ("grp-a", ("10.0.0.2", 10911))
    a.leave()
    assert not a.stop.is_set() and direct.MasterWatch.watches.get(tuple(namesrvs)) is a
    b.leave()
    assert a.stop.is_set() and tuple(namesrvs) not in direct.MasterWatch.watches
    c = direct.MasterWatch.join(namesrvs, 1.0)  # a new one once the last was left
    assert c is not a
    c.leave()
