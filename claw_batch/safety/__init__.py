"""What keeps a job in its place: where a tool may read and write (paths, control files),
opening exactly what was approved, atomic writes, the child environment, redaction and the
fences around outside content. Imports only claw_batch's root leaves."""
