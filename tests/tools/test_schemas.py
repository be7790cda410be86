"""The built-in tools' schemas, kept in claw_batch.tools.schemas so that the first request
needs no pydantic: the same as their signatures derive, byte for byte (the prompt and every
job's fingerprint carry them), and the tools' code imported only when a tool is called."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

from claw_batch.tools import schemagen
from claw_batch.tools.registry import BUILT_IN, TOOLS
from claw_batch.tools.schemas import SPECS

# sha256 of the specs as every request has sent them since the schemas were derived
# (claw_batch 0.1.0): a change here changes every fingerprint and re-runs every job.
SPECS_SHA256 = "a75b5b8c06b88f0c3b514092fa428badc12e0d866d6299e6e1e6e949d41c1fb6"


def test_the_stored_schemas_are_what_the_signatures_derive() -> None:
    # If this fails: `python -m claw_batch.tools.schemagen && ruff format claw_batch/tools`.
    assert json.dumps(SPECS, ensure_ascii=False) == json.dumps(
        schemagen.derived(), ensure_ascii=False
    )
    assert list(SPECS) == list(BUILT_IN) == list(TOOLS)


def test_the_specs_sent_are_unchanged_byte_for_byte() -> None:
    # A job is sent (and fingerprinted with) the specs of its own tools only: a tool added
    # since (delegate) leaves the others' as they were.
    older = [t for name, t in TOOLS.items() if name not in ADDED]
    sent = [[t.spec().name, t.spec().description, t.spec().parameters] for t in older]
    text = json.dumps(sent, ensure_ascii=False)
    assert hashlib.sha256(text.encode()).hexdigest() == SPECS_SHA256


ADDED = ("delegate",)  # after 0.1.0


PROBE = """
import sys
from claw_batch.tools.registry import TOOLS
specs = [t.spec() for t in TOOLS.values()]
print(sorted(m for m in ("pydantic", "claw_batch.tools.files", "claw_batch.tools.bash",
    "claw_batch.tools.memory", "claw_batch.tools.grep") if m in sys.modules))
"""


def test_the_specs_need_neither_pydantic_nor_the_tools_code() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"
