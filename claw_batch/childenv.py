"""The environment child processes start from: an allow-list, never the runner's own env
(which holds API keys)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

BASE_NAMES = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TERM", "USER", "TMPDIR")


def scrubbed_env(
    passthrough: Iterable[str] = (), environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """BASE_NAMES and the `passthrough` names that are set in `environ` (default os.environ)."""
    source = os.environ if environ is None else environ
    env = {name: source[name] for name in (*BASE_NAMES, *passthrough) if name in source}
    env.setdefault("PATH", os.defpath)
    return env
