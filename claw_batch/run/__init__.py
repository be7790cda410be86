"""One `claw run`: the runner, its session, what its jobs share, the worker pool, preparing
a job and running it, the job recording and the run's close-out, results, the lock and the
--json envelope. Imports every layer below it; nothing below imports it."""
