from __future__ import annotations

from typing import Protocol

from claw_batch.llm.messages import ChatRequest, Completion


class LLM(Protocol):
    def complete(self, request: ChatRequest, *, deadline: float) -> Completion:
        """Answer one chat request.

        `deadline` is a `time.monotonic()` value: the call returns or raises
        `LimitExceeded` by then, whatever the endpoint does. Errors the endpoint returns
        and that retrying does not fix raise `ModelError`.
        """
        ...
