"""The run ledger read back: what a run of an older claw, which kept neither the trigger nor
the command as typed, is shown as (issue 16, point 10)."""

from __future__ import annotations

import pytest

from claw_batch.store.history import trigger_of, typed


@pytest.mark.parametrize(
    ("argv", "command", "trigger"),
    [
        ("/home/u/.venv/bin/claw run -j 4", "claw run -j 4", "hand"),
        ("/srv/claw_batch/__main__.py run --due -C /srv/p", "claw run --due -C /srv/p", "cron"),
        (
            "/usr/bin/python3/claw_batch/__main__.py hook run -C . -f clawfile.yaml pre-push --",
            "claw hook run -C . -f clawfile.yaml pre-push --",
            "hook pre-push",
        ),
        ("/home/u/.local/bin/claw schedule -j 2", "claw schedule -j 2", "schedule"),
        ("/home/u/.local/bin/claw watch triage", "claw watch triage", "watch"),
        ("claw run nightly", "claw run nightly", "hand"),
    ],
)
def test_an_older_run_is_named_by_its_command(argv: str, command: str, trigger: str) -> None:
    assert (typed(argv), trigger_of(argv, None)) == (command, trigger)


def test_the_ledger_word_wins() -> None:
    assert trigger_of("claw run --due", "schedule") == "schedule"
