"""`python -m claw_batch`: the `claw` program. For `-m`, Python puts the working directory
first on the import path, and the working directory is a project whose files a job may write
(`anyio.py` at its root would be imported by the first MCP call): it comes off the path
before anything else is imported. The `claw` script never had it there."""

import os
import sys

_WORKING = os.getcwd()
sys.path[:] = [p for p in sys.path if p not in ("", ".", _WORKING)]

from claw_batch.cli import entry  # noqa: E402

entry()
