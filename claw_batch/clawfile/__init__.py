"""Reading clawfile.yaml: the YAML with its lines, the fields, the checks, their messages,
the cache of the validated file, and `claw init`'s scaffold. Imports the layers below it
(plan, skills, llm, safety, ...)."""
