"""What claw keeps on disk about runs: the ledger (.claw/state.db: schema, queries, file
hashes, verdicts) and the transcripts. Imports llm, safety and the root leaves."""
