"""A batch's output and error files read: each line's reply, or its failure, by custom_id
(claw_batch.llm.batch)."""

from __future__ import annotations

import json
from collections.abc import Callable

from claw_batch.llm import wire
from claw_batch.llm.messages import Completion


def read_lines(
    data: bytes,
    replies: dict[str, Completion],
    failed: dict[str, tuple[int, str]],
    redact: Callable[[str], str],
) -> None:
    """The replies and failures of an output or error file."""
    from claw_batch.llm import failures

    for raw in data.splitlines():
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
            cid = line["custom_id"]
        except (ValueError, KeyError, TypeError):
            continue  # a line that is not one: its request has no reply, and goes again
        response = line.get("response") or {}
        status = response.get("status_code") if isinstance(response, dict) else None
        body = response.get("body") if isinstance(response, dict) else None
        error = line.get("error")
        if status == 200 and error is None:
            try:
                replies[cid] = wire.completion_from_reply(body)
            except (wire.MalformedReply, RecursionError) as exc:
                failed[cid] = (200, redact(f"malformed reply: {exc}"))
            continue
        if error is not None and status is None:  # e.g. batch_expired: the line never ran
            code = error.get("code") if isinstance(error, dict) else None
            if code in ("batch_expired", "batch_cancelled"):
                continue
            failed[cid] = (500, redact(failures.error_detail(error, None)))
            continue
        inner = body.get("error", body) if isinstance(body, dict) else body
        failed[cid] = (int(status or 500), redact(failures.error_detail(inner, None)))
