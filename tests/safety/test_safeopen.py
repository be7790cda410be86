"""safeopen: what is read is what was opened, whatever its path leads to since."""

from __future__ import annotations

import os
from pathlib import Path

from claw_batch.safety.safeopen import open_checked, open_dir


def test_a_directory_is_listed_as_opened_though_its_path_now_leads_elsewhere(
    tmp_path: Path,
) -> None:
    checked = tmp_path / "inbox"
    checked.mkdir()
    (checked / "mine.txt").write_text("x")
    fd, _ = open_checked(checked, "inbox")
    try:
        checked.rename(tmp_path / "moved")
        (tmp_path / "elsewhere").mkdir()
        (tmp_path / "elsewhere" / "theirs.txt").write_text("y")
        checked.symlink_to(tmp_path / "elsewhere")
        listing = open_dir(fd)
        try:
            assert os.listdir(listing) == ["mine.txt"]
        finally:
            os.close(listing)
    finally:
        os.close(fd)
