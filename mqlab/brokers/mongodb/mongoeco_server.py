"""Serve one mongoeco engine on the MongoDB wire protocol until SIGTERM or SIGINT.

Run by ``mqlab.brokers.mongodb.cluster`` with the Python >= 3.13 of the stand-in's own venv (which
has mongoeco); it imports nothing from mqlab. Prints ``serving HOST PORT`` once it listens.

    python mongoeco_server.py --host 127.0.0.1 --port 27017
"""

from __future__ import annotations

import argparse
import asyncio
import signal


async def serve(host: str, port: int) -> None:
    from mongoeco.engines import MemoryEngine
    from mongoeco.wire import AsyncMongoEcoProxyServer

    server = AsyncMongoEcoProxyServer(engine=MemoryEngine(), host=host, port=port)
    address = await server.start()
    print(f"serving {address.host} {address.port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await server.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    asyncio.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
