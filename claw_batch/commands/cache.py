"""`claw cache stats|prune|clear`: the call cache (claw_batch.llm.callcache) seen and trimmed."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import click

from claw_batch.commands.common import handle_errors, load, project_options

_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]?)B?\Z", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


@click.group()
def cache() -> None:
    """See or trim the call cache.

    Every complete model reply is kept in .claw/cache/ by its request, so that a job that
    runs again replays the turns it paid for (README: Costs and budgets).
    """


@cache.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout.")
@project_options
@handle_errors
def stats(as_json: bool, directory: Path | None, file: Path | None) -> int:
    """Say how many replies the call cache holds, their size, age and hits.

    \b
    Examples:
      claw cache stats
      claw cache stats --json
    """
    from claw_batch.llm import callstore

    where = callstore.cache_dir(load(directory, file).root)
    with _readable(where):
        s = callstore.stats(where)
    if as_json:
        fields = {
            "entries": s.entries,
            "bytes": s.bytes,
            "file_bytes": s.file_bytes,
            "oldest": _iso(s.oldest),
            "newest": _iso(s.newest),
            "hits": s.hits,
            "saved_tokens": s.saved_tokens,
        }
        click.echo(json.dumps(fields, indent=2))
        return 0
    click.echo(f"entries  {s.entries:,}")
    click.echo(f"size     {_size(s.file_bytes)} on disk ({_size(s.bytes)} of replies)")
    click.echo(f"oldest   {_shown(s.oldest)}")
    click.echo(f"newest   {_shown(s.newest)}")
    click.echo(f"hits     {s.hits:,} (replies replayed instead of paid)")
    click.echo(f"saved    {s.saved_tokens:,} tokens")
    return 0


@cache.command()
@click.option(
    "--older-than", metavar="SPAN", help="Remove replies not used for this long: 30d, 12h, 2w."
)
@click.option(
    "--max-size",
    metavar="SIZE",
    help="Then remove the replies used longest ago until the rest fit: 500M, 2G.",
)
@project_options
@handle_errors
def prune(
    older_than: str | None, max_size: str | None, directory: Path | None, file: Path | None
) -> int:
    """Remove replies by age or to fit a size.

    Never while a run holds the project (exit 75). Without options, to the clawfile's
    `cache: {max_size: ...}` (2G by default), as every run does when it ends.

    \b
    Examples:
      claw cache prune --older-than 30d
      claw cache prune --max-size 500M
    """
    from claw_batch.clock import now_for_run
    from claw_batch.llm import callstore
    from claw_batch.run.lock import ProjectLock
    from claw_batch.store import history

    project = load(directory, file)
    age = None
    if older_than is not None:
        from claw_batch.errors import UsageError

        now = now_for_run(os.environ)
        try:
            age = (now - history.since(older_than, now)).total_seconds()
        except UsageError:
            raise UsageError(f"--older-than {older_than!r}: use e.g. 12h, 30d or 2w") from None
    limit = _parse_size(max_size) if max_size is not None else None
    if age is None and limit is None:
        limit = project.config.cache.max_size
    where = callstore.cache_dir(project.root)
    with ProjectLock(project.root, argv="claw cache prune"), _readable(where):
        removed = callstore.prune(where, older_than=age, max_size=limit)
    click.echo(f"claw: removed {removed:,} cached repl{'y' if removed == 1 else 'ies'}", err=True)
    return 0


@cache.command()
@project_options
@handle_errors
def clear(directory: Path | None, file: Path | None) -> int:
    """Remove every cached reply.

    Never while a run holds the project (exit 75).

    \b
    Examples:
      claw cache clear
    """
    from claw_batch.llm import callstore
    from claw_batch.run.lock import ProjectLock

    project = load(directory, file)
    with ProjectLock(project.root, argv="claw cache clear"):
        removed = callstore.clear(callstore.cache_dir(project.root))
    click.echo(f"claw: removed {removed:,} cached repl{'y' if removed == 1 else 'ies'}", err=True)
    return 0


@contextlib.contextmanager
def _readable(where: Path) -> Iterator[None]:
    """A damaged calls.db (a disk error, a file copied half) as a usage error that says the
    way out, not a crash."""
    import sqlite3

    from claw_batch.errors import UsageError

    try:
        yield
    except sqlite3.Error as e:
        raise UsageError(
            f"the call cache {where / 'calls.db'} cannot be read ({e}); `claw cache clear` "
            "removes it (runs then start a new one)"
        ) from None


def _parse_size(text: str) -> int:
    from claw_batch.errors import UsageError

    found = _SIZE.match(text.strip())
    if found is None:
        raise UsageError(
            f"--max-size {text!r}: expected a size such as 500M or 2G (K, M, G, T: powers "
            "of 1024) or a number of bytes"
        )
    return int(float(found[1]) * _UNITS[found[2].upper()])


def _size(n: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= factor:
            return f"{n / factor:.1f} {unit}"
    return f"{n} bytes"


def _iso(when: float | None) -> str | None:
    return None if when is None else dt.datetime.fromtimestamp(when).astimezone().isoformat()


def _shown(when: float | None) -> str:
    from claw_batch.clock import shown

    return "-" if when is None else shown(dt.datetime.fromtimestamp(when).astimezone())
