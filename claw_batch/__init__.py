"""claw: make for LLM agent tasks."""

__version__ = "0.1.0"
