"""A batch's output and error files read: each line's reply, or its failure, by custom_id
(claw_batch.llm.batch)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from claw_batch.llm import wire
from claw_batch.llm.messages import Completion

CUSTOM_ID = re.compile(r"claw-[0-9a-f]{40}")  # claw_batch.llm.batchlines.custom_id


def read_lines(
    data: bytes,
    replies: dict[str, Completion],
    failed: dict[str, tuple[int, str]],
    redact: Callable[[str], str],
) -> None:
    """The replies and failures of an output or error file. A line that is not one (not
    JSON, a custom_id that is not claw's, a status that is not an HTTP status) is skipped:
    its request has no reply, and counts as missing (claw_batch.llm.batch)."""
    for raw in data.splitlines():
        if not raw.strip():
            continue
        try:
            _read_line(json.loads(raw), replies, failed, redact)
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            continue


def _read_line(
    line: object,
    replies: dict[str, Completion],
    failed: dict[str, tuple[int, str]],
    redact: Callable[[str], str],
) -> None:
    from claw_batch.llm import failures

    if not isinstance(line, dict):
        return
    cid = line.get("custom_id")
    if not isinstance(cid, str) or not CUSTOM_ID.fullmatch(cid):
        return  # not a request claw made
    response = line.get("response") or {}
    status = response.get("status_code") if isinstance(response, dict) else None
    body = response.get("body") if isinstance(response, dict) else None
    error = line.get("error")
    if status is not None and not _http_status(status):
        return
    if status == 200 and error is None:
        try:
            replies[cid] = wire.completion_from_reply(body)
        except (wire.MalformedReply, RecursionError) as exc:
            failed[cid] = (200, redact(f"malformed reply: {exc}"))
        return
    if error is not None and status is None:  # e.g. batch_expired: the line never ran
        code = error.get("code") if isinstance(error, dict) else None
        if code in ("batch_expired", "batch_cancelled"):
            return
        failed[cid] = (500, redact(failures.error_detail(error, None)))
        return
    inner = body.get("error", body) if isinstance(body, dict) else None
    failed[cid] = (status or 500, redact(failures.error_detail(inner, None)))


def _http_status(status: object) -> bool:
    return type(status) is int and 100 <= status <= 599
