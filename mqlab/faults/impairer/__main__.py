"""``python -m mqlab.faults.impairer``."""

import sys

from .main import main

sys.exit(main())
