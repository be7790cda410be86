from __future__ import annotations

import pytest

from claw_batch.safety.onscreen import in_json, visible


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\x1b]52;c;Y3VybA==\x07", "\\x1b]52;c;Y3VybA==\\x07"),  # OSC 52: the clipboard
        ("\x1b]0;owned\x07", "\\x1b]0;owned\\x07"),  # OSC 0: the window title
        ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),  # CSI 2J: the screen cleared
        ("\x9b2J \x9d0;t\x9c", "\\x9b2J \\x9d0;t\\x9c"),  # the same in C1 code points
        ("ok\rFAILED\x08\x08", "ok\\x0dFAILED\\x08\\x08"),  # a line written over
        ("\x00\x7f\x0b\x0c", "\\x00\\x7f\\x0b\\x0c"),
    ],
    ids=["osc52", "osc0", "csi", "c1", "overwrite", "nul-del-vt-ff"],
)
def test_control_characters_become_visible_text(text: str, shown: str) -> None:
    assert visible(text) == shown


def test_text_a_person_reads_is_left_alone() -> None:
    text = "line one\n\tindented — café ✓ 日本語 \\x1b as typed \xa0\u200b"
    assert visible(text) == text


def test_json_keeps_no_raw_c1_control_and_stays_json() -> None:
    import json

    value = {"text": "a\x1b]0;t\x07 \x9b2J \x7f é"}
    written = in_json(json.dumps(value, ensure_ascii=False))
    assert not any(c in written for c in "\x1b\x07\x9b\x7f"), written
    assert json.loads(written) == value
