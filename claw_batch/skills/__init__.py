"""Agent Skills: discovery and parsing of SKILL.md, their cache, what `claw skills` reports,
and the built-in skills. Imports the layers below it (memory, store, ...)."""
