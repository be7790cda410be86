from __future__ import annotations

import pytest

from claw_batch.globs import glob_to_regex, match, match_file


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("*.md", "x.md", True),
        ("*.md", "d/x.md", False),  # `*` does not cross '/'
        ("d/*.md", "d/x.md", True),
        ("d/*.md", "d/e/x.md", False),
        ("?.md", "a.md", True),
        ("?.md", "ab.md", False),
        ("a?b", "a/b", False),  # nor does `?`
        ("**/*.md", "x.md", True),
        ("**/*.md", "d/e/x.md", True),
        ("**/*.md", "d/e/x.txt", False),
        ("a/**", "a/b", True),
        ("a/**", "a/b/c/d.txt", True),
        ("a/**", "a", False),
        ("a/**", "ab/c", False),
        ("a/**/b.txt", "a/b.txt", True),
        ("a/**/b.txt", "a/x/y/b.txt", True),
        ("a/**/b.txt", "a/x/yb.txt", False),
        ("**", "any/thing/at/all", True),
        ("a**b", "axxb", True),
        ("a**b", "a/b", False),  # `**` inside a segment is a plain `*`
        ("[ab].txt", "a.txt", True),
        ("[ab].txt", "c.txt", False),
        ("[!ab].txt", "c.txt", True),
        ("[!ab].txt", "a.txt", False),
        ("[!a]", "/", False),  # a class never matches '/'
        ("[a-c]1", "b1", True),
        ("[]]", "]", True),
        ("[abc", "[abc", True),  # an unclosed class is literal text
        ("*.{md,txt}", "x.txt", True),
        ("*.{md,txt}", "x.py", False),
        ("{a,b/{c,d}}/x", "b/d/x", True),
        ("{x}", "{x}", True),
        ("a.b", "axb", False),  # regex characters are literal
        ("(x)+", "(x)+", True),
        ("reports/*.md", "./reports/a.md", True),
    ],
)
def test_match(pattern: str, path: str, expected: bool) -> None:
    assert match(pattern, path) is expected


def test_glob_to_regex_is_cached() -> None:
    assert glob_to_regex("src/**/*.py") is glob_to_regex("src/**/*.py")


@pytest.mark.parametrize(
    ("pattern", "path", "base", "expected"),
    [
        ("*.py", "src/deep/x.py", ".", True),  # no '/': the file name, at any depth
        ("src/*.py", "src/x.py", ".", True),
        ("sub/*.py", "src/sub/x.py", "src", True),  # relative to the searched dir
        ("src/sub/*.py", "src/sub/x.py", "src", True),  # or to the root
        ("sub/*.py", "src/sub/x.py", ".", False),
        ("sub/*.py", "srcx/sub/x.py", "src", False),
    ],
)
def test_match_file(pattern: str, path: str, base: str, expected: bool) -> None:
    assert match_file(pattern, path, base) is expected
