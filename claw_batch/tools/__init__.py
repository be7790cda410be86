"""The tools a model may call: their code, schemas and registry (`registry.TOOLS`); their
names are in claw_batch.toolnames. Imports the layers below it (sandbox, taint, memory,
llm, safety, ...)."""
