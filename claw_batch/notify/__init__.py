"""Results delivered to people (`notify:`): a task's notice sent to a webhook, by e-mail or
to a command, with retries and a timeout, never changing a job's result."""
