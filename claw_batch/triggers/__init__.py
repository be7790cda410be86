"""What starts runs: cron slots (--due, `claw schedule`, crontab lines), git hooks and the
watched folders (watching, settling, handing files over). Imports run and the layers below
it."""
