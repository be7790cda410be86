"""Glob patterns over project-relative POSIX paths.

`*` and `?` stay within one path segment, `**` spans any number of directories
(`a/**` is everything under `a`, `**/*.md` is every .md file at any depth), `[...]` is a
character class (`[!...]` negates it) and `{a,b}` an alternation. Unlike fnmatch, nothing
but `**` crosses a `/`, so `workspace/*.md` does not reach into subdirectories.
"""

from __future__ import annotations

import functools
import posixpath
import re


def fixed_dir(pattern: str) -> str:
    """The directories a pattern names before its first wildcard: `inbox/new/*.txt` ->
    `inbox/new`, `*.md` -> `.` (the last part is a file name, never counted)."""
    parts = pattern.split("/")
    fixed = 0
    while fixed < len(parts) - 1 and not any(c in parts[fixed] for c in "*?[{"):
        fixed += 1
    return "/".join(parts[:fixed]) or "."


@functools.lru_cache(maxsize=1024)
def glob_to_regex(pattern: str) -> re.Pattern[str]:
    return re.compile(_translate(pattern), re.DOTALL)


def match(pattern: str, relpath: str) -> bool:
    return glob_to_regex(pattern).fullmatch(_normalise(relpath)) is not None


def match_file(pattern: str, relpath: str, base: str = ".") -> bool:
    """How search tools filter files: a pattern without `/` matches the file name at any depth
    (like ripgrep and .gitignore); one with `/` matches the path relative to the project root
    or relative to `base`, the directory being searched."""
    relpath = _normalise(relpath)
    if "/" not in pattern:
        return match(pattern, posixpath.basename(relpath))
    if match(pattern, relpath):
        return True
    base = _normalise(base)
    if base == ".":
        return False
    prefix = base + "/"
    return relpath.startswith(prefix) and match(pattern, relpath[len(prefix) :])


def _normalise(relpath: str) -> str:
    while relpath.startswith("./"):
        relpath = relpath[2:]
    return relpath


def _translate(pattern: str) -> str:
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**", i):
            i = _double_star(pattern, i, out)
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            i = _char_class(pattern, i, out)
            continue
        elif c == "{":
            i = _alternation(pattern, i, out)
            continue
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _double_star(pattern: str, i: int, out: list[str]) -> int:
    end = i + 2
    whole_segment = i == 0 or pattern[i - 1] == "/"
    if whole_segment and end == len(pattern):
        out.append(".*")
    elif whole_segment and pattern[end] == "/":
        out.append("(?:.*/)?")
        end += 1
    else:  # `a**b` is not a directory wildcard; it behaves like `*`
        out.append("[^/]*")
    return end


def _char_class(pattern: str, i: int, out: list[str]) -> int:
    j = i + 1
    negate = j < len(pattern) and pattern[j] in "!^"
    if negate:
        j += 1
    if j < len(pattern) and pattern[j] == "]":  # a leading ] is a member, not the end
        j += 1
    close = pattern.find("]", j)
    if close < 0:
        out.append(re.escape("["))
        return i + 1
    body = pattern[i + 1 + negate : close]
    members = "".join(ch if ch == "-" else re.escape(ch) for ch in body)
    out.append(f"[^/{members}]" if negate else f"(?!/)[{members}]")
    return close + 1


def _alternation(pattern: str, i: int, out: list[str]) -> int:
    depth, parts, start = 0, [], i + 1
    for j in range(i, len(pattern)):
        ch = pattern[j]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                parts.append(pattern[start:j])
                if len(parts) == 1:  # `{x}` without a comma is literal text
                    break
                out.append("(?:" + "|".join(_translate(p) for p in parts) + ")")
                return j + 1
        elif ch == "," and depth == 1:
            parts.append(pattern[start:j])
            start = j + 1
    out.append(re.escape("{"))
    return i + 1
