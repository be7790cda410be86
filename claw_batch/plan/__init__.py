"""What a run means before any model call: the task graph and its overlaps, the jobs, the
templates and their sandbox, fingerprints, the quick check (a large task's in two processes)
and the up-to-date decision (one Decider). Imports the layers below it."""
