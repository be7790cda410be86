"""What starts runs: cron slots (--due, `claw schedule`, crontab lines), git hooks and the
watched folders. Imports run and the layers below it."""
