"""Amazon SQS (boto3): a standard queue, batch send, long-poll receive, batch delete.

- send: SendMessageBatch (10 entries per call, so larger batches take several
  calls); SQS bodies are text, so each binary message is base64-encoded here,
  and only here. Any failed entry fails the send.
- receive: ReceiveMessage (at most 10) with long polling: WaitTimeSeconds is
  ``timeout_s`` rounded up to whole seconds, at least 1, at most
  ``long_poll_max_s`` (as mqperf did; short polling, WaitTimeSeconds=0, samples
  only some servers and can answer empty while messages wait). A long poll
  returns as soon as a message is there, so it never sits on messages, but may
  wait up to a second longer than a fractional ``timeout_s`` when none comes.
- ack: DeleteMessageBatch with the receipt handles.
- redelivery: a delivery is redelivered when ApproximateReceiveCount > 1;
  ``redelivery_timeout_s`` is ``visibility_timeout_s``.
- remaining: ApproximateNumberOfMessages + ...NotVisible + ...Delayed (SQS's own
  approximate counts; moto's are exact), ``in_flight`` the NotVisible part. SQS
  cannot be read without consuming: no identification.

Region, endpoint and queue URL come from the profile (or, for the local moto
server, from the cluster's endpoints). Credentials come from the standard AWS
chain and are never written anywhere by mqlab; against moto, fixed dummy keys.
"""

from __future__ import annotations

import base64
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import boto3
import botocore.config
import botocore.exceptions

from mqlab.brokers.base import Delivery, Driver, Receiver, Remaining, Sender
from mqlab.errors import DriverError
from mqlab.typed import spec

LOG = logging.getLogger(__name__)
MAX_BATCH = 10  # SQS's limit for every batch call
DUMMY_KEY = "mqlab-moto"  # moto accepts any key; used only when the endpoint says so


@dataclass(frozen=True)
class Settings:
    region: str = spec("eu-west-1", help="AWS region of the queue")
    queue_url: str = spec("", help="use this existing queue; empty: create one per run")
    endpoint_url: str = spec("", help="empty: the region's public endpoint")
    visibility_timeout_s: int = spec(30, min=0, max=43_200)
    long_poll_max_s: int = spec(20, min=0, max=20, help="cap on WaitTimeSeconds")
    message_retention_s: int = spec(1_209_600, min=60, max=1_209_600)
    max_connections: int = spec(10, min=1)


def encode(payload: bytes) -> str:
    return base64.b64encode(payload).decode("ascii")


def decode(body: str) -> bytes:
    return base64.b64decode(body)


def chunks(items: Sequence[Any], size: int = MAX_BATCH) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def wait_time_s(timeout_s: float, long_poll_max_s: int) -> int:
    """WaitTimeSeconds for a receive of ``timeout_s``: a long poll of at least 1 s (0 only
    for a receive that must not wait, or when the profile caps long polls at 0)."""
    if timeout_s <= 0:
        return 0
    return min(max(1, math.ceil(timeout_s)), long_poll_max_s)


class SqsSender(Sender):
    def __init__(self, driver: SqsDriver):
        self.client = driver.client()
        self.url = driver.queue_url()

    def send(self, batch: Sequence[bytes]) -> None:
        for part in chunks(batch):
            entries = [{"Id": str(i), "MessageBody": encode(m)} for i, m in enumerate(part)]
            try:
                reply = self.client.send_message_batch(QueueUrl=self.url, Entries=entries)
            except botocore.exceptions.BotoCoreError as e:
                raise DriverError(f"sqs: send failed: {e}") from e
            except botocore.exceptions.ClientError as e:
                raise DriverError(f"sqs: send failed: {e}") from e
            if reply.get("Failed"):
                raise DriverError(
                    f"sqs: {len(reply['Failed'])} messages not accepted: {reply['Failed'][0]}"
                )


class SqsReceiver(Receiver):
    def __init__(self, driver: SqsDriver):
        self.client = driver.client()
        self.url = driver.queue_url()
        self.long_poll_max_s = driver.settings.long_poll_max_s

    def receive(self, max_messages: int, timeout_s: float) -> list[Delivery]:
        try:
            reply = self.client.receive_message(
                QueueUrl=self.url,
                MaxNumberOfMessages=max(1, min(max_messages, MAX_BATCH)),
                WaitTimeSeconds=wait_time_s(timeout_s, self.long_poll_max_s),
                MessageSystemAttributeNames=["ApproximateReceiveCount"],
            )
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            raise DriverError(f"sqs: receive failed: {e}") from e
        out = []
        for m in reply.get("Messages", []):
            count = int(m.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
            out.append(Delivery(decode(m["Body"]), m["ReceiptHandle"], count > 1))
        return out

    def ack(self, deliveries: Sequence[Delivery]) -> None:
        for part in chunks(deliveries):
            entries = [{"Id": str(i), "ReceiptHandle": d.handle} for i, d in enumerate(part)]
            try:
                reply = self.client.delete_message_batch(QueueUrl=self.url, Entries=entries)
            except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
                raise DriverError(f"sqs: ack failed: {e}") from e
            if reply.get("Failed"):
                raise DriverError(
                    f"sqs: {len(reply['Failed'])} deletes failed: {reply['Failed'][0]}"
                )


class SqsDriver(Driver):
    name = "sqs"
    Settings = Settings
    client_libraries = ("boto3", "botocore")

    def __init__(self, settings: Any, endpoints: Any, queue: str):
        super().__init__(settings, endpoints, queue)
        extra = endpoints.extra
        self.region = str(extra.get("region") or settings.region)
        self.endpoint_url = str(extra.get("endpoint_url") or settings.endpoint_url) or None
        self.dummy_credentials = bool(extra.get("dummy_credentials", False))
        self.queue_name = queue.replace(".", "-")
        self._url = settings.queue_url or None

    def client(self) -> Any:
        """A boto3 SQS client (one per worker thread: clients are not shared)."""
        s: Settings = self.settings
        kwargs: dict[str, Any] = {}
        if self.dummy_credentials:
            kwargs = {"aws_access_key_id": DUMMY_KEY, "aws_secret_access_key": DUMMY_KEY}
        session = boto3.session.Session(region_name=self.region, **kwargs)
        cfg = botocore.config.Config(
            max_pool_connections=s.max_connections,
            retries={"max_attempts": 3, "mode": "standard"},
            read_timeout=s.long_poll_max_s + 10,
        )
        return session.client("sqs", endpoint_url=self.endpoint_url, config=cfg)

    def queue_url(self) -> str:
        if self._url is None:
            try:
                self._url = str(self.client().get_queue_url(QueueName=self.queue_name)["QueueUrl"])
            except botocore.exceptions.ClientError as e:
                raise DriverError(f"sqs: queue {self.queue_name} not found (run setup): {e}") from e
        return self._url

    def setup(self) -> None:
        s: Settings = self.settings
        c = self.client()
        try:
            if s.queue_url:
                c.get_queue_attributes(QueueUrl=s.queue_url, AttributeNames=["VisibilityTimeout"])
                return
            reply = c.create_queue(
                QueueName=self.queue_name,
                Attributes={
                    "VisibilityTimeout": str(s.visibility_timeout_s),
                    "MessageRetentionPeriod": str(s.message_retention_s),
                },
            )
            self._url = str(reply["QueueUrl"])
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            raise DriverError(f"sqs: cannot create queue {self.queue_name}: {e}") from e

    def teardown(self) -> None:
        """Delete the queue setup created; a queue named by ``queue_url`` is left alone."""
        if self.settings.queue_url:
            return
        try:
            self.client().delete_queue(QueueUrl=self.queue_url())
        except (DriverError, botocore.exceptions.ClientError):
            LOG.debug("sqs: queue %s already gone", self.queue_name)

    @property
    def redelivery_timeout_s(self) -> float:
        return float(self.settings.visibility_timeout_s)

    def remaining(self, identify: bool = False) -> Remaining:
        """SQS's approximate counts: visible + not visible (in flight) + delayed."""
        names = ["", "NotVisible", "Delayed"]
        try:
            attrs = self.client().get_queue_attributes(
                QueueUrl=self.queue_url(),
                AttributeNames=[f"ApproximateNumberOfMessages{n}" for n in names],
            )["Attributes"]
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            raise DriverError(f"sqs: cannot read the counts of {self.queue_name}: {e}") from e
        counts = [int(attrs.get(f"ApproximateNumberOfMessages{n}", 0)) for n in names]
        return Remaining(sum(counts), None, counts[1])

    def sender(self) -> Sender:
        return SqsSender(self)

    def receiver(self) -> Receiver:
        return SqsReceiver(self)

    def server_versions(self) -> list[str]:
        """SQS reports no version: the local emulator's own, else the service and region."""
        server = self.endpoints.extra.get("server")
        return [str(server)] if server else [f"Amazon SQS ({self.region})"]


DRIVER = SqsDriver
