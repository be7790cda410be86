"""What the ledger and transcripts say afterwards: `claw log`, `claw show`, the HTML report,
its data and charts. Imports store and the layers below it."""
