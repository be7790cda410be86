"""One `claw run`: the runner, its session, the worker pool, preparing and running a job,
results, the lock and the --json envelope. Imports every layer below it; nothing below
imports it."""
