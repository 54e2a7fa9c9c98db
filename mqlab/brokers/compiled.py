"""mqlab's compiled send path (``mqlab._sendpath``, mqlab/_sendpath.c), where the install
built it (setup.py: ``uv sync`` via scripts/bootstrap, ``uv build`` for the fleet's worker
bundle); ``module`` is None where it could not be built, and the drivers send through
Python instead. ``recv_module`` likewise: ``mqlab._recvpath`` (mqlab/_recvpath.c), the
PostgreSQL and Redis receivers' path and the Kafka receivers' record reader."""

from __future__ import annotations

import types

module: types.ModuleType | None
try:
    from mqlab import _sendpath as module
except ImportError:  # an install that did not build it
    module = None
SEND_PATH = "compiled" if module is not None else "python"

# the compiled PostgreSQL receive path (mqlab/_recvpath.c), None where not built
recv_module: types.ModuleType | None = None
try:
    from mqlab import _recvpath

    recv_module = _recvpath
except ImportError:  # an install that did not build it: a receiver thread each
    pass
