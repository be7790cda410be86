"""A streamed reply's server-sent events, as the chunks they carry."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from claw_batch.llm.failures import EndpointError

STREAM_ERROR = "An error occurred during streaming"  # the SDK's words, for an error without any


def chunks(lines: Iterable[bytes]) -> Iterator[object]:
    """The decoded JSON of each event's data, up to `[DONE]`; raises `json.JSONDecodeError`
    for data that is not JSON and `EndpointError` for a chunk that is an error."""
    data: list[str] = []
    for raw in lines:
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if line:
            field, _, value = line.partition(":")
            if field == "data":
                data.append(value[1:] if value.startswith(" ") else value)
            continue  # comments (":"), `event`, `id`, `retry`: nothing a chat stream needs
        if not data:
            continue
        text = "\n".join(data)
        data = []
        if text.startswith("[DONE]"):
            return
        chunk = json.loads(text)
        if isinstance(chunk, dict) and chunk.get("error"):
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else None
            raise EndpointError(message if isinstance(message, str) and message else STREAM_ERROR)
        yield chunk
