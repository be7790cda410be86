"""The ledger's tables (`.claw/state.db`): the schema, the columns later versions of claw
added to it, and how a path is kept in them.

The tables are read and written where their concept lives: runs, jobs, calls and done in
claw_batch.store.state, files in claw_batch.store.filehash, tainted and tainted_blobs in
claw_batch.taint.ledger. Tables that only some commands need are created by their module
when first used (verdicts, slots, watched, the batch journal's batches and batch_requests).
"""

from __future__ import annotations

import os

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    started TEXT NOT NULL,
    finished TEXT,
    status TEXT NOT NULL,          -- running | ok | failed | limit | interrupted | error
    exit_code INTEGER,
    argv TEXT NOT NULL,            -- the command as typed: claw run -j 4 (older: argv[0] too)
    trigger TEXT                   -- hand | cron | schedule | watch | hook <name>; NULL: older
);
CREATE TABLE IF NOT EXISTS jobs (
    run_id TEXT NOT NULL REFERENCES runs(id),
    task TEXT NOT NULL,
    item TEXT NOT NULL DEFAULT '',
    status TEXT NOT NULL,          -- running | ok | failed | limit | interrupted
    reason TEXT,
    started TEXT NOT NULL,
    duration_s REAL,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    cached_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL,
    output TEXT,
    error TEXT,
    transcript TEXT,
    remembered TEXT,               -- a failed check's verdict given again: the run that gave it
    saved_tokens INTEGER NOT NULL DEFAULT 0,  -- what turns the call cache replayed would cost
    saved_usd REAL,                -- NULL: nothing replayed, or the price is not known
    PRIMARY KEY (run_id, task, item)
);
-- The last successful run of each job: what make calls the up-to-date check. A row exists
-- only after the job's outputs are on disk; it is deleted when the job starts again.
CREATE TABLE IF NOT EXISTS done (
    task TEXT NOT NULL,
    item TEXT NOT NULL DEFAULT '',
    fingerprint TEXT NOT NULL,
    parts TEXT NOT NULL,           -- JSON: the fingerprint's components, for `claw why`
    outputs TEXT NOT NULL,         -- JSON: {path: sha256} of the outputs as written
    result TEXT NOT NULL,          -- the final answer, for needs.X.result downstream
    run_id TEXT NOT NULL,
    quick TEXT,                    -- plan.quickcheck.TaskKey: up to date by stat keys alone
    tainted TEXT,                  -- the outside content the job read (its result is fenced)
    PRIMARY KEY (task, item)
);
-- Files that hold outside content (claw_batch.taint.ledger): a job that had read some wrote
-- `path`; while its content is `sha256`, whatever reads it gets it fenced.
CREATE TABLE IF NOT EXISTS tainted (
    path TEXT PRIMARY KEY,
    sha256 TEXT NOT NULL,
    source TEXT NOT NULL,          -- the outside content the writing job had read
    task TEXT NOT NULL,
    item TEXT NOT NULL DEFAULT '',
    run_id TEXT NOT NULL
);
-- The git blob ids of every content a row of `tainted` was ever about: committed, git's
-- object store keeps it after the file changes (claw_batch.taint.staged.stored).
CREATE TABLE IF NOT EXISTS tainted_blobs (
    blob TEXT PRIMARY KEY,
    path TEXT NOT NULL             -- the file it was, as a fence names it
);
-- The stat shortcut: a file is re-hashed only when its mtime, size, inode or ctime changed
-- (a command can set the first three back, not the ctime). A path that is not UTF-8 is
-- kept as a BLOB of its bytes (`stored_path`), here and in `tainted`.
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY,
    mtime_ns INTEGER NOT NULL,
    size INTEGER NOT NULL,
    inode INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    ctime_ns INTEGER               -- NULL: hashed by a claw that did not look (hash again)
);
-- A job that starts forgets its last success in the statement that marks it running (see
-- State.start_job).
CREATE TRIGGER IF NOT EXISTS forget_done AFTER INSERT ON jobs WHEN NEW.status = 'running'
BEGIN
    DELETE FROM done WHERE task = NEW.task AND item = NEW.item;
END;
CREATE TABLE IF NOT EXISTS calls (
    run_id TEXT NOT NULL,
    task TEXT NOT NULL,
    item TEXT NOT NULL DEFAULT '',
    step INTEGER NOT NULL,
    model TEXT,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cached_tokens INTEGER NOT NULL,
    seconds REAL,
    cost_usd REAL                  -- NULL: the model's price is not known
);
"""

# Columns added since the first ledger, oldest first: (table, column, type). A run adds them
# to an older ledger; a read-only open reads around their absence.
ADDED = (
    ("done", "quick", "TEXT"),  # the quick check
    ("calls", "cost_usd", "REAL"),  # cost accounting
    ("done", "tainted", "TEXT"),  # taint (SCHEMA made its tables)
    ("files", "ctime_ns", "INTEGER"),  # the ctime in the stat shortcut
    ("runs", "trigger", "TEXT"),  # what started a run (claw log, claw report)
    ("jobs", "remembered", "TEXT"),  # a remembered verdict's run (claw log, show, report)
    ("jobs", "saved_tokens", "INTEGER NOT NULL DEFAULT 0"),  # the call cache's replays
    ("jobs", "saved_usd", "REAL"),
    ("jobs", "node", "TEXT"),  # the cluster node a job ran on (--executor ray); NULL: here
    ("jobs", "parent", "TEXT"),  # a sub-job's (`delegate`): its parent job's name; NULL: none
)

# Made after the columns above: an index may name one of them.
INDEXES = """
-- What the quick check reads of a task's jobs (State.sealed), without the rest of each row:
-- a tenth of the pages.
CREATE INDEX IF NOT EXISTS done_quick ON done (task, item, quick);
"""


def stored_path(rel: str) -> str | bytes:
    """A path as the ledger keeps it: as text, or when it is not UTF-8 (a name decoded with
    surrogateescape, which SQLite's text refuses) as a BLOB of its bytes. A BLOB never
    equals a text, so the two forms cannot name the same row."""
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(rel)
    return rel


def loaded_path(value: str | bytes) -> str:
    """`stored_path` undone: the name as os functions take it."""
    return os.fsdecode(value) if isinstance(value, bytes) else value
