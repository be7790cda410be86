"""Text made fit for where a message goes: cut to a bound without breaking a character, kept
on one line where a line is expected, and a job's output kept from pinging a channel, opening
a link or closing the code block it is shown in (Slack's mrkdwn, Discord's markdown)."""

from __future__ import annotations

import re

MARK = "… [cut]"
ZWSP = "\u200b"  # between `@` and `everyone`: shown as before, pings nobody
# Line breaks and controls (a header's CR/LF, a terminal's escapes), and the bidirectional
# overrides that make a line read otherwise than it is.
_BREAKS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]+")
_PINGS = re.compile(r"@(?=(?:everyone|here|channel)\b)", re.IGNORECASE)
_DISCORD_MARKUP = re.compile(r"([\\*_~`|\[\]<>])")  # bold, italics, code, spoilers, links


def units(text: str) -> int:
    """Its length in UTF-16 code units: what Slack and Discord count (one per character,
    two for one outside the Basic Multilingual Plane): never fewer than its characters."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def cut(text: str, limit: int, mark: str = MARK) -> str:
    """`text` if it is at most `limit` UTF-16 units long, else its start and `mark` within
    `limit`. Cut between characters, never inside one."""
    if units(text) <= limit:
        return text
    room = max(limit - units(mark), 0)
    head = text[:room]
    while units(head) > room:
        head = head[: -max((units(head) - room) // 2, 1)]
    return head + mark


def cut_bytes(text: str, limit: int, mark: str = MARK) -> str:
    """`text` if it is at most `limit` bytes of UTF-8, else its start and `mark` within
    `limit`, never half a character."""
    data = text.encode()
    if len(data) <= limit:
        return text
    room = max(limit - len(mark.encode()), 0)
    return data[:room].decode(errors="ignore") + mark


def cut_escaped(text: str, limit: int, mark: str = MARK) -> str:
    """`cut` for text holding HTML entities (`&lt;`): never half of one."""
    done = cut(text, limit, mark)
    if done == text:
        return text
    head = done[: -len(mark)]
    amp = head.rfind("&")
    if amp != -1 and ";" not in head[amp:]:
        head = head[:amp]
    return head + mark


def one_line(text: str) -> str:
    """`text` with every run of line breaks and control characters made one space: a title,
    a subject, an item never starts a line (or a header) of its own."""
    return _BREAKS.sub(" ", text).strip()


def unfenced(text: str) -> str:
    """Text for inside a ``` code block: a ``` of its own would close the block."""
    return text.replace("```", f"``{ZWSP}`")


def slack(text: str) -> str:
    """Text for Slack's mrkdwn: its control characters escaped, so that no `<!channel>`,
    `<@U123>` or `<https://…|link>` in a job's output is read as one, and no @here pings."""
    escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _PINGS.sub("@" + ZWSP, escaped)


def discord(text: str) -> str:
    """Text for Discord's markdown outside a code block: its markup characters escaped and
    @everyone/@here broken (the message's allowed_mentions also turns every ping off)."""
    return _PINGS.sub("@" + ZWSP, _DISCORD_MARKUP.sub(r"\\\1", text))


def discord_code(text: str) -> str:
    """Text for inside a Discord code block (no markdown there, but pings still show)."""
    return _PINGS.sub("@" + ZWSP, unfenced(text)).replace("<@", f"<{ZWSP}@")
