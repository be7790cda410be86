"""The agent's memory: MEMORY.md, the daily notes, the notes corpus and its search. Imports
the layers below it (terminal, store, llm, safety)."""
