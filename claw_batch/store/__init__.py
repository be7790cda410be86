"""What claw keeps on disk about runs: the ledger (.claw/state.db: its connection, schema,
runs and jobs, file hashes, verdicts, the runs read back) and the transcripts. Imports llm,
safety and the root leaves."""
