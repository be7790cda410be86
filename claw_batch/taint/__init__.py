"""Outside content followed through a project: a job's taint, the ledger of tainted files,
the staged changes and git's objects, and the watch on untainted commands. Imports the
layers below it (skills, memory, store, safety, ...)."""
