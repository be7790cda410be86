"""Whether a glob can match a file an output template can name: both read as small automata
whose product is searched for a common path (see claw_batch.plan.graph for how a template reads)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass


def clean(path: str) -> str:
    while path.startswith("./"):
        path = path[2:]
    return path


# --- patterns as automata ------------------------------------------------------------------


@dataclass(frozen=True)
class _Chars:
    """A set of characters, or with `negated` every character but these."""

    chars: frozenset[str]
    negated: bool = False

    def meets(self, other: _Chars) -> bool:
        if self.negated and other.negated:
            return True  # both exclude finitely many characters
        if self.negated:
            return bool(other.chars - self.chars)
        if other.negated:
            return bool(self.chars - other.chars)
        return bool(self.chars & other.chars)


_ANY = _Chars(frozenset(), negated=True)
_IN_SEGMENT = _Chars(frozenset("/"), negated=True)
_DIGIT = _Chars(frozenset("0123456789"))
TEMPLATE_CODE = re.compile(r"\{\{(.*?)\}\}|\{%.*?%\}|\{#.*?#\}", re.DOTALL)
_READS_A_PATH = re.compile(
    r"\bitem\b(?!\s*\.\s*(?:stem|name|suffix)\b)|\b(?:needs|inputs?|files|git|read|glob)\b"
)
_TRIM = (re.compile(r"\s+(?=\{[{%#]-)"), re.compile(r"(?<=-[}%#]\})\s+"))


class Nfa:
    """States 0..n; `start` is 0; `moves[s]` = (characters, next state); `eps[s]` = free moves."""

    def __init__(self, prefix: str, suffix: str) -> None:
        self.moves: list[list[tuple[_Chars, int]]] = [[]]
        self.eps: list[list[int]] = [[]]
        self.end = 0  # where the pattern built so far ends; the accepting state once built
        # Literal text every path starts and ends with: most pairs differ there, at no cost.
        self.prefix, self.suffix = prefix, suffix
        self._closures: dict[int, list[int]] = {}

    def state(self) -> int:
        self.moves.append([])
        self.eps.append([])
        return len(self.moves) - 1

    def one(self, chars: _Chars) -> None:
        nxt = self.state()
        self.moves[self.end].append((chars, nxt))
        self.end = nxt

    def many(self, chars: _Chars) -> None:
        loop = self.state()  # a state of its own, so that no other move shares the loop
        self.eps[self.end].append(loop)
        self.moves[loop].append((chars, loop))
        self.end = loop

    def closure(self, state: int) -> list[int]:
        """The states reached from `state` by free moves, itself included."""
        if state not in self._closures:
            found, todo = [state], [state]
            while todo:
                for nxt in self.eps[todo.pop()]:
                    if nxt not in found:
                        found.append(nxt)
                        todo.append(nxt)
            self._closures[state] = found
        return self._closures[state]

    def text(self, text: str) -> None:
        for char in text:
            self.one(_Chars(frozenset(char)))

    def either(self, branches: Sequence[str], build: Callable[[Nfa, str], None]) -> None:
        start, join = self.end, self.state()
        for branch in branches:
            self.end = self.state()
            self.eps[start].append(self.end)
            build(self, branch)
            self.eps[self.end].append(join)
        self.end = join


@functools.lru_cache(maxsize=1024)
def glob_nfa(pattern: str) -> Nfa:
    nfa = Nfa(*_literal_ends(pattern, opening="*?[{", closing="*?]}"))
    _add_glob(nfa, pattern)
    return nfa


def _add_glob(nfa: Nfa, pattern: str) -> None:
    """The same language as `globs.glob_to_regex(pattern)`, read the same way."""
    i, n = 0, len(pattern)
    while i < n:
        if pattern.startswith("**", i) and (i == 0 or pattern[i - 1] == "/"):
            if i + 2 == n:
                nfa.many(_ANY)
            elif pattern[i + 2] == "/":  # `**/`: nothing, or any directories
                start = nfa.end
                nfa.many(_ANY)
                nfa.one(_Chars(frozenset("/")))
                nfa.eps[start].append(nfa.end)
                i += 1
            else:
                nfa.many(_IN_SEGMENT)
            i += 2
        elif pattern.startswith("**", i):
            nfa.many(_IN_SEGMENT)
            i += 2
        else:
            i = _add_glob_char(nfa, pattern, i)


def _add_glob_char(nfa: Nfa, pattern: str, i: int) -> int:
    char = pattern[i]
    if char == "*":
        nfa.many(_IN_SEGMENT)
    elif char == "?":
        nfa.one(_IN_SEGMENT)
    elif char == "[" and (end := _class_end(pattern, i)) > 0:
        negated = pattern[i + 1] in "!^"
        members = _members(pattern[i + 1 + negated : end])
        nfa.one(_Chars(members | {"/"}, True) if negated else _Chars(members - {"/"}))
        return end + 1
    elif char == "{" and (parts := _alternatives(pattern, i)) is not None:
        nfa.either(parts[0], _add_glob)
        return parts[1]
    else:
        nfa.text(char)
    return i + 1


def _class_end(pattern: str, i: int) -> int:
    j = i + 1
    if j < len(pattern) and pattern[j] in "!^":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1
    return pattern.find("]", j)


def _members(body: str) -> frozenset[str]:
    """The characters of a class body, `a-z` being a range as in a regex class."""
    chars: set[str] = set()
    k = 0
    while k < len(body):
        if k + 2 < len(body) and body[k + 1] == "-":
            chars.update(chr(c) for c in range(ord(body[k]), ord(body[k + 2]) + 1))
            k += 3
        else:
            chars.add(body[k])
            k += 1
    return frozenset(chars)


def _alternatives(pattern: str, i: int) -> tuple[list[str], int] | None:
    """`{a,b}` -> (["a", "b"], index after it); None when it is literal text (no comma)."""
    depth, parts, start = 0, [], i + 1
    for j in range(i, len(pattern)):
        if pattern[j] == "{":
            depth += 1
        elif pattern[j] == "}":
            depth -= 1
            if depth == 0:
                parts.append(pattern[start:j])
                return (parts, j + 1) if len(parts) > 1 else None
        elif pattern[j] == "," and depth == 1:
            parts.append(pattern[start:j])
            start = j + 1
    return None


@functools.lru_cache(maxsize=1024)
def template_nfa(template: str, task: str) -> Nfa:
    for trim in _TRIM:
        template = trim.sub("", template)
    nfa, at = Nfa(*_literal_ends(template, opening="{", closing="}")), 0
    codes = list(TEMPLATE_CODE.finditer(template))
    for code in codes:
        nfa.text(template[at : code.start()])
        at = code.end()
        if code.group(0).startswith("{%"):
            nfa.many(_ANY)
            at = codes[-1].end()
            break
        if code.group(1) is not None:
            _add_expression(nfa, code.group(1).strip("-+ \t\r\n"), task)
    nfa.text(template[at:])
    return nfa


def _literal_ends(pattern: str, *, opening: str, closing: str) -> tuple[str, str]:
    """The text before the first character of `opening` and after the last of `closing`."""
    first = next((i for i, char in enumerate(pattern) if char in opening), len(pattern))
    last = max((i for i, char in enumerate(pattern) if char in closing), default=-1)
    return pattern[:first], pattern[last + 1 :]


def _add_expression(nfa: Nfa, expression: str, task: str) -> None:
    if expression == "today":
        for char in "0000-00-00":  # rendering fills it with the date, YYYY-MM-DD
            if char == "0":
                nfa.one(_DIGIT)
            else:
                nfa.text(char)
    elif expression == "task":
        nfa.text(task)
    elif _READS_A_PATH.search(expression):
        nfa.many(_ANY)
    else:
        nfa.many(_IN_SEGMENT)


def intersect(a: Nfa, b: Nfa) -> bool:
    """Whether some path is in the language of both."""
    if not (a.prefix.startswith(b.prefix) or b.prefix.startswith(a.prefix)):
        return False
    if not (a.suffix.endswith(b.suffix) or b.suffix.endswith(a.suffix)):
        return False
    seen: set[tuple[int, int]] = set()
    todo = [(0, 0)]
    while todo:
        pair = todo.pop()
        if pair in seen:
            continue
        seen.add(pair)
        for p in a.closure(pair[0]):
            for q in b.closure(pair[1]):
                if p == a.end and q == b.end:
                    return True
                todo += [
                    (p2, q2)
                    for chars_a, p2 in a.moves[p]
                    for chars_b, q2 in b.moves[q]
                    if chars_a.meets(chars_b)
                ]
    return False


def reads(glob: str) -> Nfa:
    """The paths a glob can match."""
    return glob_nfa(clean(glob))


def writes(output: str, task: str) -> Nfa:
    """The paths an output template of `task` can name."""
    return template_nfa(clean(output), task)
