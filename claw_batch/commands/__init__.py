"""One module per command; each parses, calls the library, renders, returns an exit code.
claw_batch.cli names them and imports only the one that runs."""
