"""Builds mqlab's compiled modules (everything else is in pyproject.toml).

``mqlab._sendpath`` (mqlab/_sendpath.c, with mqlab/_pulsarwire.h) is the workers' send
path for Redis, PostgreSQL, NATS JetStream and Apache Pulsar: a worker's senders driven
from one thread, each batch written, sent and its replies read without the interpreter
lock (issue 13, bench/clients.py).
``uv sync`` (scripts/bootstrap) and ``uv build`` (the fleet's worker bundle) build it with
the machine's C compiler; where that fails, mqlab installs without it and the drivers
send through Python.

``mqlab._recvpath`` (mqlab/_recvpath.c) is the PostgreSQL and Redis Streams receive
path: a worker's receivers driven from one thread in the same way (issue 28), and the
readers of Kafka's record batches and of RocketMQ's pop answers for their receivers in
lanes (mqlab/_kafkarecords.h, mqlab/_rocketmqpop.h); built and missed alike.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "mqlab._sendpath",
            ["mqlab/_sendpath.c"],
            depends=["mqlab/_pulsarwire.h"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Werror"],
            optional=True,  # no compiler: installed without it (the Python path)
        ),
        Extension(
            "mqlab._recvpath",
            ["mqlab/_recvpath.c"],
            depends=["mqlab/_kafkarecords.h", "mqlab/_rocketmqpop.h"],
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Werror"],
            optional=True,  # no compiler: the receivers run through Python, a thread each
        ),
    ]
)
