"""Outside content followed through a project: a job's taint, its bash commands, the ledger
of tainted files, what a command could reach of outside content (the staged changes, git's
objects) and the watch on untainted commands. Imports the layers below it (skills, memory,
store, safety, ...)."""
