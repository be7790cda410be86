"""Reading a YAML file while keeping what PyYAML throws away: the line of every key and list
item (so that errors can say where), and duplicate keys (PyYAML silently keeps the last)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from claw_batch.clawfile.yamlbounds import Bounds
from claw_batch.config import KeyPath, dotted
from claw_batch.errors import ClawfileError


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a file: `name:line: path: message`."""

    file: str
    line: int | None
    path: KeyPath
    message: str

    def __str__(self) -> str:
        parts = [self.file if self.line is None else f"{self.file}:{self.line}"]
        if self.path:
            parts.append(dotted(self.path))
        return ": ".join([*parts, self.message])


def problems_error(problems: list[Problem], main: str) -> ClawfileError:
    """One error listing each problem once: those of the file `main` by line, then those of
    other files (templates) by file and line."""
    ordered = sorted(problems, key=lambda p: (p.file != main, p.file, p.line or 0))
    return ClawfileError("\n".join(dict.fromkeys(str(p) for p in ordered)))


@dataclass(frozen=True)
class YamlSource:
    name: str
    data: Any
    key_lines: dict[KeyPath, int] = field(default_factory=dict)
    # For multi-line string values: the line on which their text starts.
    text_lines: dict[KeyPath, int] = field(default_factory=dict)

    def line(self, path: KeyPath) -> int | None:
        """The line of `path`, or of its nearest ancestor that YAML knows about."""
        for end in range(len(path), 0, -1):
            found = self.key_lines.get(path[:end])
            if found is not None:
                return found
        return None

    def problem(self, path: KeyPath, message: str, *, at: KeyPath | None = None) -> Problem:
        return Problem(self.name, self.line(path if at is None else at), path, message)


MAX_BYTES = 1_000_000  # a clawfile is settings and a few prompts; long prompts live in files


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, with every parse event checked against `yamlbounds` as the
    composer takes it: nothing past the bounds is ever built."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.bounds = Bounds()

    def get_event(self) -> yaml.Event:
        event: yaml.Event = super().get_event()  # type: ignore[no-untyped-call]
        self.bounds.see(event)
        return event


def load_yaml(path: Path, name: str) -> YamlSource:
    """Parse `path` (shown to the user as `name`) or raise ClawfileError."""
    text = _read(path, name)
    try:
        loader = _BoundedLoader(text)  # this already refuses control characters
    except yaml.reader.ReaderError as exc:
        raise ClawfileError(_unprintable(exc, text, name)) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return YamlSource(name, None)
        source = YamlSource(name, None)
        _walk(node, (), source, set())
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        raise ClawfileError(_syntax_message(exc, name, text)) from None
    except yaml.YAMLError as exc:  # unmarked errors are rare; keep PyYAML's words
        raise ClawfileError(f"{name}: {exc}") from None
    finally:
        loader.dispose()
    return YamlSource(name, data, source.key_lines, source.text_lines)


def _read(path: Path, name: str) -> str:
    try:
        with path.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ClawfileError(f"{name}: cannot read it: {exc.strerror}") from None
    if len(data) > MAX_BYTES:
        raise ClawfileError(
            f"{name}: larger than {MAX_BYTES:,} bytes, more than a clawfile may be; "
            "move long prompts into files (prompt: prompts/NAME.md)"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ClawfileError(f"{name}: not a UTF-8 text file") from None


def _unprintable(exc: yaml.reader.ReaderError, text: str, name: str) -> str:
    """PyYAML refuses control characters (NUL, U+0001...) anywhere in the file, even in quotes."""
    line = text.count("\n", 0, exc.position) + 1
    code = int(exc.character)
    return (
        f"{name}:{line}: the control character U+{code:04X} is not allowed in a YAML file; "
        f'remove it, or write it as the escape "\\u{code:04x}" in a double-quoted string'
    )


# PyYAML's problems with a quoted string that is never closed: it reads on to the end of the
# file (or the next `---`) and marks that place, lines below the quote that opened it.
_UNCLOSED = ("found unexpected end of stream", "found unexpected document separator")


def _syntax_message(exc: yaml.MarkedYAMLError, name: str, text: str) -> str:
    opened = exc.context_mark
    if exc.context == "while scanning a quoted scalar" and exc.problem in _UNCLOSED and opened:
        return (
            f"{name}:{opened.line + 1}: the quoted string that starts here is never closed; "
            "add the closing quote"
        )
    start = _runaway_quote(text, exc.problem_mark)
    if start is not None and exc.problem_mark:
        return (
            f"{name}:{start}: the quoted string that starts here runs on to the quote on "
            f"line {exc.problem_mark.line + 1} ({exc.problem}); close it on line {start}"
        )
    mark = exc.problem_mark or exc.context_mark
    where = f"{name}:{mark.line + 1}" if mark else name
    problem = exc.problem or "invalid YAML"
    if "'\\t'" in problem:
        return f"{where}: tab character used for indentation; YAML needs spaces"
    if exc.context and exc.context.startswith("while"):
        problem = f"{problem} ({exc.context})"
    return f"{where}: {problem}"


def _runaway_quote(text: str, mark: yaml.Mark | None) -> int | None:
    """The line where a quoted string opens that a missing quote let run on to the line of
    `mark`: the next quote closed it there, and PyYAML marks what follows, lines too low."""
    if mark is None:
        return None
    last: yaml.Token | None = None
    try:
        for token in yaml.scan(text, Loader=yaml.SafeLoader):
            if token.start_mark.index >= mark.index:
                break
            last = token
    except yaml.YAMLError:
        pass  # the scanner stops at the error too: the tokens before it are what counts
    quoted = isinstance(last, yaml.ScalarToken) and last.style in ('"', "'")
    if last is None or not quoted or last.end_mark.line != mark.line:
        return None
    return None if last.start_mark.line == mark.line else last.start_mark.line + 1


def _walk(node: yaml.Node, path: KeyPath, source: YamlSource, active: set[int]) -> None:
    if id(node) in active:  # a recursive alias: nothing more to map
        return
    active.add(id(node))
    if isinstance(node, yaml.MappingNode):
        _walk_mapping(node, path, source, active)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            source.key_lines.setdefault((*path, index), item.start_mark.line + 1)
            _walk(item, (*path, index), source, active)
    elif isinstance(node, yaml.ScalarNode):
        _refuse_long_number(node, path, source)
        if node.style in ("|", ">"):
            source.text_lines[path] = node.start_mark.line + 2  # the text starts below `|`
    active.discard(id(node))


_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
MAX_NUMBER = 100  # characters of a number: past 4,300 digits Python's int() refuses one


def _refuse_long_number(node: yaml.ScalarNode, path: KeyPath, source: YamlSource) -> None:
    if node.tag in _NUMBER_TAGS and len(node.value) > MAX_NUMBER:
        where = f"{source.name}:{node.start_mark.line + 1}"
        raise ClawfileError(
            f"{where}: {dotted(path) or 'a key'}: a number of {len(node.value):,} characters, "
            f"more than any setting needs (at most {MAX_NUMBER}); quote it if it is text"
        )


def _walk_mapping(
    node: yaml.MappingNode, path: KeyPath, source: YamlSource, active: set[int]
) -> None:
    seen: dict[str, int] = {}
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.value == "<<":
            continue  # complex keys and merge keys: let the constructor deal with them
        _refuse_long_number(key_node, path, source)
        key, line = key_node.value, key_node.start_mark.line + 1
        if key in seen:
            raise yaml.MarkedYAMLError(
                problem=f"duplicate key '{key}' (first at line {seen[key]})",
                problem_mark=key_node.start_mark,
            )
        seen[key] = line
        source.key_lines.setdefault((*path, key), line)
        _walk(value_node, (*path, key), source, active)
