"""The RocketMQ receive path's own steps around client 5.1.2 (``lean_receive``): the
messages a receive returns through the client's own decoding, without the debug text
the client formats per response."""

from __future__ import annotations

import asyncio
import functools
import os
from types import SimpleNamespace
from typing import Any

import pytest

from mqlab.brokers.rocketmq import library
from mqlab.brokers.rocketmq.receiver import _responses, lean_receive


class Unprintable:
    """A response that fails the test if anything formats it as text."""

    def __init__(self, response: Any):
        self.response = response

    def HasField(self, name: str) -> bool:  # noqa: N802 - protobuf's name
        return bool(self.response.HasField(name))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.response, name)

    def __str__(self) -> str:
        raise AssertionError("a response was formatted as text")

    def __format__(self, spec: str) -> str:
        raise AssertionError("a response was formatted as text")

    __repr__ = __str__


class Stream:
    """A ReceiveMessage call's responses as the gRPC aio call yields them."""

    def __init__(self, responses: list[Any]):
        self.responses = list(responses)

    def __aiter__(self) -> Stream:
        return self

    async def __anext__(self) -> Any:
        if not self.responses:
            raise StopAsyncIteration
        return self.responses.pop(0)


def message_response(body: bytes, message_id: str, attempt: int = 1) -> Any:
    from rocketmq.grpc_protocol.definition_pb2 import DigestType, Encoding
    from rocketmq.grpc_protocol.service_pb2 import ReceiveMessageResponse
    from rocketmq.v5.util import Misc

    r = ReceiveMessageResponse()
    m = r.message
    m.topic.name = "t"
    m.body = body
    p = m.system_properties
    p.message_id, p.receipt_handle, p.delivery_attempt = message_id, f"rh-{message_id}", attempt
    p.body_encoding = Encoding.IDENTITY
    p.body_digest.type, p.body_digest.checksum = DigestType.CRC32, Misc.crc32_checksum(body)
    return r


def status_response(code: int) -> Any:
    from rocketmq.grpc_protocol.service_pb2 import ReceiveMessageResponse

    r = ReceiveMessageResponse()
    r.status.code = code
    return r


def test_the_stream_keeps_messages_status_and_delivery_time_without_formatting_any() -> None:
    from rocketmq.grpc_protocol.definition_pb2 import Code
    from rocketmq.grpc_protocol.service_pb2 import ReceiveMessageResponse

    library.client()
    stamped = ReceiveMessageResponse()
    stamped.delivery_timestamp.seconds = 5
    kept = [message_response(b"a", "m1"), stamped, status_response(Code.OK)]
    got = asyncio.run(
        _responses(Stream([Unprintable(r) for r in [*kept, ReceiveMessageResponse()]]))
    )
    assert [g.response for g in got] == kept  # the empty response is dropped, as the client does


def consumer_with_a_stream(responses: list[Any]) -> Any:
    """An object the client's own ``Consumer._receive_coroutine`` runs on: its RPC
    answers with ``responses``; its response handling is the client's."""
    from rocketmq.v5.consumer.consumer import Consumer

    async def receive_message(*_args: Any, **_kw: Any) -> Stream:
        return Stream([Unprintable(r) for r in responses])

    fake = SimpleNamespace(
        rpc_client=SimpleNamespace(receive_message=receive_message),
        sign=lambda: (),
        _consumer_group="g",
        _Consumer__message_decode_executor=None,
    )
    for step in ("receive_message_response", "handle_receive_message_response"):
        name = f"_Consumer__{step}"
        setattr(fake, name, functools.partial(getattr(Consumer, name), fake))
    return fake


def test_a_receive_returns_the_clients_own_messages_through_the_lean_stream() -> None:
    from rocketmq.grpc_protocol.definition_pb2 import Code
    from rocketmq.v5.consumer.consumer import Consumer

    library.client()
    body = os.urandom(1024)
    fake = consumer_with_a_stream(
        [message_response(body, "m1"), message_response(b"x", "m2", 3), status_response(Code.OK)]
    )
    lean_receive(fake)
    queue = SimpleNamespace(endpoints="e")
    got = asyncio.run(Consumer._receive_coroutine(fake, queue, None, 5))
    assert [(m.body, m.message_id, m.delivery_attempt, m.corrupted) for m in got] == [
        (body, "m1", 1, False),
        (b"x", "m2", 3, False),
    ]
    assert got[0].receipt_handle == "rh-m1" and got[0].endpoints == "e"


def test_without_it_the_client_formats_every_response() -> None:
    from rocketmq.grpc_protocol.definition_pb2 import Code
    from rocketmq.v5.consumer.consumer import Consumer

    library.client()
    fake = consumer_with_a_stream([message_response(b"x", "m1"), status_response(Code.OK)])
    with pytest.raises(AssertionError, match="formatted as text"):
        asyncio.run(Consumer._receive_coroutine(fake, SimpleNamespace(endpoints="e"), None, 5))


def test_a_refusal_in_the_stream_is_still_the_clients_error() -> None:
    from rocketmq.grpc_protocol.definition_pb2 import Code
    from rocketmq.v5.consumer.consumer import Consumer

    library.client()
    fake = consumer_with_a_stream([status_response(Code.TOPIC_NOT_FOUND)])
    lean_receive(fake)
    with pytest.raises(Exception, match="TOPIC_NOT_FOUND|40402|topic"):
        asyncio.run(Consumer._receive_coroutine(fake, SimpleNamespace(endpoints="e"), None, 5))


def test_a_client_without_the_step_is_left_alone() -> None:
    other = SimpleNamespace()
    lean_receive(other)
    assert not vars(other)
