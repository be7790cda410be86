"""One job's conversation with a model: the tool loop, the system prompt, answers that must
be JSON, the budget. Imports the layers below it (tools, llm, memory, skills, ...)."""
