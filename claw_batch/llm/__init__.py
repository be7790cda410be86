"""Models behind one small Protocol: the OpenAI-compatible adapter, its wire format, record
and replay, the breaker, endpoints, and the values a call carries (messages, usage, prices).
Imports safety and the root leaves."""

from claw_batch.llm.base import LLM

__all__ = ["LLM"]
