from __future__ import annotations

import pytest

from claw_batch.notify import markup

TEXTS = ["plain ascii " * 50, "é" * 300, "😀" * 300, "a😀é\u0301" * 100, "&lt;" * 200]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("limit", [1, 7, 8, 9, 100, 2000])
def test_cut_never_passes_its_bound_nor_splits_a_character(text: str, limit: int) -> None:
    done = markup.cut(text, limit)
    assert markup.units(done) <= max(limit, markup.units(markup.MARK))
    assert done == text or done.endswith(markup.MARK)
    done.encode("utf-8")  # no lone surrogate
    assert text.startswith(done.removesuffix(markup.MARK))


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("limit", [10, 11, 12, 13, 101, 4000])
def test_cut_bytes_keeps_valid_utf8(text: str, limit: int) -> None:
    done = markup.cut_bytes(text, limit)
    assert len(done.encode()) <= limit
    assert text.startswith(done.removesuffix(markup.MARK))


def test_units_count_as_utf16_does() -> None:
    assert markup.units("a😀é") == len("a😀é".encode("utf-16-le")) // 2 == 4


def test_cut_escaped_never_leaves_half_an_entity() -> None:
    for limit in range(8, 30):
        done = markup.cut_escaped("&lt;" * 20, limit)
        head = done.removesuffix(markup.MARK)
        assert head == "&lt;" * (len(head) // 4)


def test_one_line() -> None:
    assert markup.one_line(" a\r\nBcc: x\x1b[2J\u2028b\t") == "a Bcc: x [2J b"


def test_pings_and_links_defused() -> None:
    assert markup.slack("<!channel> @here <@U1> <http://x|y> a&b") == (
        "&lt;!channel&gt; @\u200bhere &lt;@U1&gt; &lt;http://x|y&gt; a&amp;b"
    )
    assert markup.discord("@everyone *b* [l](http://x) <@1>") == (
        "@\u200beveryone \\*b\\* \\[l\\](http://x) \\<@1\\>"
    )
    assert markup.discord_code("@Everyone <@&1> ```") == "@\u200bEveryone <\u200b@&1> ``\u200b`"
