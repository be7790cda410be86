"""Reasoning written into `content`: Qwen3, QwQ, DeepSeek-R1 and their distils on a server run
without a reasoning parser (vLLM, llama.cpp, Ollama) put `<think>…</think>` before the answer.

Only a block that opens the reply counts, or, when the chat template opened it (DeepSeek-R1's
does, and writes `</think>\n\n` after the thinking), the text up to a `</think>` that nothing
opened, where that `</think>` ends a line and the text before it is no JSON (does not start
with `{` or `[`). When the server sent the thinking apart (`reasoning_content`), the content
holds none, and only a block that opens it counts. An answer that mentions the tags elsewhere
keeps them: inside a sentence, in a JSON answer, or beside reasoning sent apart. A `<think>`
never closed (the reply was cut off) is all thinking.
"""

from __future__ import annotations

import re

OPEN, CLOSE = "<think>", "</think>"
_LEADING = re.compile(r"\A\s*<think>.*?(?:</think>|\Z)", re.DOTALL)
_CLOSING_A_LINE = re.compile(r"</think>(?=[ \t]*(?:\n|\Z))")


def split(text: str, *, reasoning_apart: bool = False) -> tuple[str, str]:
    """`text` as (the thinking that opens it, the rest); ("", text) when there is none.
    `reasoning_apart`: the server sent the thinking as `reasoning_content`."""
    m = _LEADING.match(text)
    if m:
        return text[: m.end()], text[m.end() :]
    if reasoning_apart or OPEN in text or text.lstrip().startswith(("{", "[")):
        return "", text
    closing = _CLOSING_A_LINE.search(text)
    if closing is None:
        return "", text
    return text[: closing.end()], text[closing.end() :]


def answer(text: str, *, reasoning_apart: bool = False) -> str:
    """What a reply says once its thinking is left out, stripped."""
    return split(text, reasoning_apart=reasoning_apart)[1].strip()
