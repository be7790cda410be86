"""Reading clawfile.yaml: loading the project (from the cache of the validated file, or by
validating), the YAML with its lines, the fields, the checks of settings and templates, their
messages, and `claw init`'s scaffold. Imports the layers below it (plan, skills, llm,
safety, ...)."""
