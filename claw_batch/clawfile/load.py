"""The project: its clawfile found (`config.clawfile_path`), then validated
(claw_batch.clawfile.validate) or, while nothing validation read has changed, taken from the
cache (claw_batch.clawfile.cache) without importing a validator."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from claw_batch.clawfile.cache import Use, cached, save
from claw_batch.config import Clawfile, Project, clawfile_path


def load_project(
    directory: Path | None = None,
    file: Path | None = None,
    *,
    cache: Use = "read",
    meanwhile: Callable[[], object] | None = None,
) -> Project:
    """The project of `directory` (or the working directory) and its clawfile (`file`, or
    the one found there or above). `cache`: "read" takes a validated clawfile from the cache
    while it is current, "write" also saves one it had to validate (into an existing
    `.claw/`), "create" makes `.claw/` for it, "off" always validates. `meanwhile`: what the
    command will need next, done while a child validates (claw_batch.clawfile.aside)."""
    path = clawfile_path(directory, file)
    root = path.parent
    if cache != "off":
        config = cached(root, path)
        if config is not None:
            return Project(root, path, config)
    aside = None
    if meanwhile is not None:
        from claw_batch.clawfile.aside import validated_aside

        aside = validated_aside(path, root, meanwhile)
    if aside is not None:
        document, variables = aside
        config = Clawfile.of(document, variables)
    else:  # pydantic, YAML and Jinja2, only when neither the cache nor a child can answer
        from claw_batch.clawfile.validate import validate

        validated = validate(path, root)
        document, variables, config = validated.document, validated.variables, validated.config
    if cache in ("write", "create"):
        save(root, path, document, variables, create=cache == "create")
    return Project(root, path, config)
