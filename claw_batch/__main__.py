from claw_batch.cli import entry

entry()
