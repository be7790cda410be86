"""Models behind one small Protocol: the OpenAI-compatible adapter and record/replay."""

from claw_batch.llm.base import LLM

__all__ = ["LLM"]
