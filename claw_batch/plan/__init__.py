"""What a run means before any model call: the task graph and its overlaps, the jobs, the
templates and their sandbox, fingerprints and the up-to-date decision. Imports the layers
below it."""
