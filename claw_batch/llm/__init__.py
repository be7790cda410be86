"""Models behind one small Protocol: the OpenAI-compatible adapter, its wire format, record
and replay, the breaker, endpoints, the values a call carries (messages, usage, prices),
what a reply's text may hold besides the answer (tool-call markup, thinking), and worker
processes that make the calls of a run with many in flight.
Imports safety and the root leaves."""

from claw_batch.llm.base import LLM

__all__ = ["LLM"]
