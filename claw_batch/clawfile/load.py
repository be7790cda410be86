"""The project: its clawfile found (`config.clawfile_path`), then validated
(claw_batch.clawfile.validate) or, while nothing validation read has changed, taken from the
cache (claw_batch.clawfile.cache) without importing a validator."""

from __future__ import annotations

from pathlib import Path

from claw_batch.clawfile.cache import Use, cached, save
from claw_batch.config import Project, clawfile_path


def load_project(
    directory: Path | None = None, file: Path | None = None, *, cache: Use = "read"
) -> Project:
    """The project of `directory` (or the working directory) and its clawfile (`file`, or
    the one found there or above). `cache`: "read" takes a validated clawfile from the cache
    while it is current, "write" also saves one it had to validate (into an existing
    `.claw/`), "create" makes `.claw/` for it, "off" always validates."""
    path = clawfile_path(directory, file)
    root = path.parent
    if cache != "off":
        config = cached(root, path)
        if config is not None:
            return Project(root, path, config)
    # pydantic, YAML and Jinja2, only when the cache cannot answer
    from claw_batch.clawfile.validate import validate

    validated = validate(path, root)
    if cache in ("write", "create"):
        save(root, path, validated.document, validated.variables, create=cache == "create")
    return Project(root, path, validated.config)
