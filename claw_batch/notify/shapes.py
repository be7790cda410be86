"""A notice as each target takes it: a title line, a plain-text message (e-mail), and the
bodies of a webhook: claw's JSON, Slack's and Discord's incoming-webhook JSON, a Teams
Adaptive Card. Every free text is bounded as the service bounds it, and a job's words
(output, errors, items) are shown as text, never read as markup or pings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from claw_batch import figures
from claw_batch.notify import markup
from claw_batch.notify.notice import ERROR_CHARS, Notice

TITLE_CHARS = 250
STATUS_WORDS = {"ok": "ok", "failed": "failed", "limit": "hit a limit"}
TAINTED = (
    "Caution: this output came from a job that read outside content; it must not be "
    "trusted as instructions."
)
SAMPLE = "A test message from `claw notify test`: no job ran."
SLACK_TEXT = 3000  # a section block's text
SLACK_FAILURES = 20
DISCORD_CONTENT = 2000
DISCORD_TITLE = 300
# A Teams message is bounded at 28 KB as a whole: bytes of UTF-8 for its two long parts.
TEAMS_FAILURES = 6000
TEAMS_EXCERPT = 12000


def title(notice: Notice) -> str:
    """`claw: nightly failed — 2 of 40 jobs failed (run 20261127T230000-ab12)`: one line."""
    what = "changed" if notice.event == "changed" and notice.status == "ok" else _word(notice)
    head = f"claw{' (test)' if notice.sample else ''}: {notice.task}"
    if notice.item:
        what += f" for {notice.item}"
    detail = _counts(notice) if notice.jobs > 1 else notice.reason if notice.status != "ok" else ""
    line = f"{head} {what}" + (f" — {detail}" if detail else "") + f" (run {notice.run_id})"
    return markup.cut(markup.one_line(line), TITLE_CHARS)


def _word(notice: Notice) -> str:
    return STATUS_WORDS.get(notice.status, notice.status)


def _counts(notice: Notice) -> str:
    """`2 of 40 jobs failed, 1 hit a limit`, or `40 jobs ok`."""
    bad = [(s, n) for s, n in sorted(notice.counts.items()) if s != "ok" and n]
    bad.sort(key=lambda sn: (sn[0] != "failed", sn[0]))
    if not bad:
        return f"{figures.count(notice.jobs, 'job')} ok"
    (first, n), rest = bad[0], bad[1:]
    said = [f"{n:,} of {figures.count(notice.jobs, 'job')} {STATUS_WORDS.get(first, first)}"]
    said += [f"{m:,} {STATUS_WORDS.get(s, s)}" for s, m in rest]
    return ", ".join(said)


def failure_lines(notice: Notice, error_chars: int = ERROR_CHARS) -> list[str]:
    """One line per failed job: `src/a.py: failed (TaskFailed): the model gave up`."""
    lines = []
    for f in notice.failures:
        why = f" ({f.reason})" if f.reason and f.reason != f.status else ""
        error = f": {markup.cut(markup.one_line(f.error), error_chars)}" if f.error else ""
        lines.append(markup.one_line(f"{f.item or notice.task}: {f.status}{why}") + error)
    if notice.more_failures:
        lines.append(f"… and {notice.more_failures:,} more")
    return lines


def output_line(notice: Notice) -> str:
    if not notice.output:
        return ""
    part = " (its start; the rest is in the file)" if notice.excerpt_cut else ""
    return f"Output: {markup.one_line(notice.output)}{part}"


def facts(notice: Notice) -> str:
    """`12,345 tokens · $0.0123 · 42.1 s · project example`."""
    said = [figures.count(notice.tokens, "token")]
    if notice.cost_usd is not None:
        said.append(figures.usd(notice.cost_usd))
    said += [figures.duration(notice.duration_s), f"project {notice.project}"]
    return " · ".join(said)


def text(notice: Notice, *, excerpt: bool = True) -> str:
    """The plain-text message: the title, the failures, the output (with `excerpt`: its
    start), the figures and the command that shows the transcript."""
    return "\n\n".join([title(notice), *_parts(notice, excerpt=excerpt)]) + "\n"


def _parts(notice: Notice, *, excerpt: bool = True, taint: bool = True) -> list[str]:
    """The message's paragraphs after its title."""
    parts = []
    if notice.sample:
        parts.append(SAMPLE)
    if notice.failures:
        parts.append("\n".join(["Failed jobs:", *(f"- {line}" for line in failure_lines(notice))]))
    if taint and notice.tainted:
        parts.append(TAINTED)
    if line := output_line(notice):
        parts.append(line)
    if excerpt and notice.excerpt:
        parts.append(notice.excerpt.rstrip("\n"))
    parts.append("\n".join([facts(notice), f"Transcript: {notice.show}" if notice.show else ""]))
    return [p.rstrip() for p in parts]


def json_body(notice: Notice) -> dict[str, Any]:
    """`format: json`, and a command's stdin: the notice's fields, and its title."""
    return {"title": title(notice), **notice.as_json()}


def slack_body(notice: Notice) -> dict[str, Any]:
    """An incoming webhook's message: `text` (the notification's line) and blocks."""

    def section(body: str) -> dict[str, Any]:
        return {"type": "section", "text": {"type": "mrkdwn", "text": body}}

    def code(body: str) -> str:
        return (
            "```" + markup.cut_escaped(markup.unfenced(markup.slack(body)), SLACK_TEXT - 6) + "```"
        )

    blocks = [section(markup.cut_escaped(f"*{markup.slack(title(notice))}*", SLACK_TEXT))]
    if notice.sample:
        blocks.append(section(markup.slack(SAMPLE)))
    if notice.failures:
        blocks.append(section(code("\n".join(failure_lines(notice, 300)))))
    if notice.tainted:
        blocks.append(section(f":warning: {markup.slack(TAINTED)}"))
    if line := output_line(notice):
        blocks.append(section(markup.cut_escaped(markup.slack(line), SLACK_TEXT)))
    if notice.excerpt:
        blocks.append(section(code(notice.excerpt.rstrip("\n"))))
    said = markup.slack(facts(notice)) + (
        f" · `{markup.slack(notice.show)}`" if notice.show else ""
    )
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": said}]})
    return {"text": markup.cut_escaped(markup.slack(title(notice)), SLACK_TEXT), "blocks": blocks}


def discord_body(notice: Notice) -> dict[str, Any]:
    """An incoming webhook's message: `content` within 2,000 characters, the title in bold
    and the rest in a code block, and no mention parsed (`allowed_mentions`)."""
    head = f"**{markup.discord(markup.cut(title(notice), DISCORD_TITLE))}**"
    if notice.tainted:
        head += f"\n:warning: **{markup.discord(TAINTED)}**"
    body = markup.discord_code("\n\n".join(_parts(notice, taint=False)))
    room = DISCORD_CONTENT - markup.units(head) - len("\n```\n\n```")
    content = f"{head}\n```\n{markup.cut(body, room)}\n```"
    return {"content": content, "allowed_mentions": {"parse": []}}


def teams_body(notice: Notice) -> dict[str, Any]:
    """A message holding one Adaptive Card, as Teams' incoming webhooks (Workflows) take it.
    A job's words are TextRuns, which Teams shows as they are (no markdown, no links)."""

    def runs(body: str, **style: Any) -> dict[str, Any]:
        return {"type": "RichTextBlock", "inlines": [{"type": "TextRun", "text": body, **style}]}

    items = [runs(title(notice), weight="Bolder", size="Medium")]
    if notice.sample:
        items.append(runs(SAMPLE, isSubtle=True))
    if notice.failures:
        failures = "\n".join(failure_lines(notice, 300))
        items.append(runs(markup.cut_bytes(failures, TEAMS_FAILURES), fontType="Monospace"))
    if notice.tainted:
        items.append(runs(TAINTED, color="Warning", weight="Bolder"))
    if line := output_line(notice):
        items.append(runs(line))
    if notice.excerpt:
        excerpt = markup.cut_bytes(notice.excerpt.rstrip("\n"), TEAMS_EXCERPT)
        items.append(runs(excerpt, fontType="Monospace"))
    items.append(runs(facts(notice) + (f" · {notice.show}" if notice.show else ""), isSubtle=True))
    card = {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": items,
    }
    return {
        "type": "message",
        "attachments": [
            {"contentType": "application/vnd.microsoft.card.adaptive", "content": card}
        ],
    }


BODIES: dict[str, Callable[[Notice], dict[str, Any]]] = {
    "json": json_body,
    "slack": slack_body,
    "discord": discord_body,
    "teams": teams_body,
}
