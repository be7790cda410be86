"""Reasoning written into `content`: Qwen3, QwQ, DeepSeek-R1 and their distils on a server run
without a reasoning parser (vLLM, llama.cpp, Ollama) put `<think>…</think>` before the answer.

Only a block that opens the reply counts, or, when the chat template opened it (DeepSeek-R1's
does), the text up to a `</think>` that nothing opened: an answer that mentions the tags
elsewhere keeps them. A `<think>` never closed (the reply was cut off) is all thinking.
"""

from __future__ import annotations

import re

OPEN, CLOSE = "<think>", "</think>"
_LEADING = re.compile(r"\A\s*<think>.*?(?:</think>|\Z)", re.DOTALL)


def split(text: str) -> tuple[str, str]:
    """`text` as (the thinking that opens it, the rest); ("", text) when there is none."""
    m = _LEADING.match(text)
    if m:
        return text[: m.end()], text[m.end() :]
    if CLOSE in text and OPEN not in text:
        end = text.index(CLOSE) + len(CLOSE)
        return text[:end], text[end:]
    return "", text


def answer(text: str) -> str:
    """What a reply says once its thinking is left out, stripped."""
    return split(text)[1].strip()
