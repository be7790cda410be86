"""The value types of clawfile.yaml that need more than a type check: names, tools, globs,
project paths, cron expressions, time zones, JSON Schemas, environment variable names, URLs,
sizes.

Each refusal is a `PydanticCustomError` of type "claw" whose message is final:
claw_batch.clawfile.fielderrors shows it as is, after the file, line and key path.
"""

from __future__ import annotations

import importlib
import re
import urllib.parse
from pathlib import PurePosixPath
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator
from pydantic_core import PydanticCustomError

from claw_batch.clawfile.fielderrors import describe
from claw_batch.mcp import names
from claw_batch.safety.paths import STATE_DIR
from claw_batch.toolnames import GRANTABLE_TOOLS, READ_ONLY_TOOLS, TOOL_NAMES

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
_SERVER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*\Z")
SERVER_NAME_MAX = 32  # SERVER__TOOL is at most 64 characters: room for the tool's own name
_MCP_TOOL = re.compile(r"[A-Za-z0-9_.*?-]+\Z")
_HEADER = re.compile(r"[A-Za-z0-9-]+\Z")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_KEY_PREFIXES = ("sk-", "sk_", "gsk_", "xai-", "hf_", "ghp_", "github_pat_", "AIza", "pplx-")
# `{a,b}` alternatives are split too: `{..,notes}` would match `..` in a write glob.
_SEGMENT_BREAK = re.compile(r"[/{},]")
_GLOB_MAGIC = re.compile(r"[*?[]")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_TEMPLATE_CODE = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.DOTALL)
KEY_ADVICE = (
    "put the key in an environment variable and name that variable with api_key_env "
    "(e.g. api_key_env: MY_API_KEY)"
)


def refuse(message: str) -> PydanticCustomError:
    # The message goes in the context so that braces in user values are not format fields.
    return PydanticCustomError("claw", "{message}", {"message": message})


def _name(name: str) -> str:
    if not _NAME.match(name):
        raise refuse(
            f"invalid name {name!r}: use letters, digits, '_', '.' and '-', "
            "starting with a letter or digit"
        )
    return name


def _server_name(name: str) -> str:
    """An MCP server's name: its tools are `mcp.SERVER.TOOL` in the clawfile and
    `SERVER__TOOL` to the model, and both must split back unambiguously."""
    if not _SERVER_NAME.match(name):
        raise refuse(
            f"invalid MCP server name {name!r}: use letters, digits, '_' and '-', starting "
            "with a letter or digit (no '.': its tools are named mcp.SERVER.TOOL)"
        )
    if names.SEPARATOR in name or name.endswith("_"):
        raise refuse(
            f"invalid MCP server name {name!r}: no '__' in it and no '_' at its end: the model "
            "calls its tools SERVER__TOOL, which must split at the first '__'"
        )
    if len(name) > SERVER_NAME_MAX:
        raise refuse(
            f"invalid MCP server name {name!r}: {len(name)} characters, at most "
            f"{SERVER_NAME_MAX}: the model calls its tools SERVER__TOOL, which must fit the 64 "
            "characters of a tool name"
        )
    return name


def _tool(name: str) -> str:
    if names.is_mcp(name):
        try:
            server, tool = names.split(name)
        except ValueError as e:
            raise refuse(str(e)) from None
        _server_name(server)
        if not _MCP_TOOL.match(tool):
            raise refuse(
                f"{name!r}: a tool's name has letters, digits, '_', '-' and '.', and a pattern "
                "'*' and '?'"
            )
        return name
    if name not in TOOL_NAMES:
        raise refuse(f"unknown tool {name!r} (known: {', '.join(TOOL_NAMES)})")
    return name


def _granted(name: str) -> str:
    """A tool `untrusted.allow` may grant: one that a read-only job does not keep anyway."""
    if name in READ_ONLY_TOOLS:
        raise refuse(
            f"{name} is read-only: a job that read outside content keeps it without a grant "
            f"(grantable: {', '.join(GRANTABLE_TOOLS)})"
        )
    return name


def _command(value: object) -> object:
    """`command:` is the program and its arguments, each an item: no shell splits a string."""
    if isinstance(value, str):
        raise refuse(
            "expected a list: the program, then each argument an item of its own, e.g. "
            "command: [python, -m, mcp_server_time] (no shell runs it)"
        )
    if isinstance(value, list) and not value:
        raise refuse(
            "an empty command: name the program and its arguments, e.g. "
            "command: [python, -m, mcp_server_time]"
        )
    return value


def _argument(value: str) -> str:
    if not value:
        raise refuse("an empty argument")
    if "\0" in value:
        raise refuse(f"{describe(value)} holds a NUL character, which no argument may")
    return value


def _header(name: str) -> str:
    if not _HEADER.match(name):
        raise refuse(f"{name!r} is not the name of an HTTP header (letters, digits and '-')")
    return name


def _one_or_many(value: object) -> object:
    return [value] if isinstance(value, str) else value  # `inputs: "a/*.md"` is one glob


def _none_as_empty(value: object) -> object:
    return {} if value is None else value  # `providers:` with everything commented out


def _bash(value: object) -> object:
    value = _one_or_many(value)
    if isinstance(value, bool) or (
        isinstance(value, list) and all(isinstance(item, str) for item in value)
    ):
        return value
    raise refuse(f"expected true, false or a list of command patterns, got {describe(value)}")


_SIZE = re.compile(r"(\d+(?:\.\d+)?)([KMGT]?)B?\Z")  # 2G, 2GB
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
SIZE_RANGE = (1 << 20, 1 << 50)  # 1M to 1024T: a smaller limit stops everything


def _size(value: object) -> int:
    """`limits:` sizes: a number of bytes, or one with K, M, G or T (powers of 1024)."""
    found = _SIZE.match(value.strip()) if isinstance(value, str) else None
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    elif found is not None:
        number = float(found[1]) * _UNITS[found[2]]  # inf for a thousand digits: too large
        size = int(number) if number <= SIZE_RANGE[1] else SIZE_RANGE[1] + 1
    else:
        raise refuse(
            "expected a size such as 512M or 2G (K, M, G, T: powers of 1024) or a number "
            f"of bytes, got {describe(value)}"
        )
    low, high = SIZE_RANGE
    if not low <= size <= high:
        raise refuse(f"{describe(value)} is out of range: a size from 1M to 1024T")
    return size


def _cron(expr: str) -> str:
    from croniter import croniter  # lazily: only clawfiles with a schedule pay for it

    if not croniter.is_valid(expr):
        raise refuse(
            f"{expr!r} is not a valid cron expression "
            "(minute hour day month weekday, e.g. '0 23 * * *' = every day at 23:00)"
        )
    return expr


def _zone(name: str) -> str:
    import zoneinfo

    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        known = {zone.lower(): zone for zone in zoneinfo.available_timezones()}
        hint = (
            f"did you mean {known[name.lower()]!r}?"
            if name.lower() in known
            else "use an IANA name such as 'Europe/Paris' or 'UTC'"
        )
        raise refuse(f"unknown time zone {name!r} ({hint})") from None
    return name


def _json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    # jsonschema is slow to import and ships no types: import it lazily, use it through Any.
    validators: Any = importlib.import_module("jsonschema.validators")
    exceptions: Any = importlib.import_module("jsonschema.exceptions")
    try:
        validators.validator_for(schema).check_schema(schema)
    except exceptions.SchemaError as exc:
        at = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in exc.absolute_path)
        where = f"at schema{at}: " if at else ""
        raise refuse(f"not a valid JSON Schema: {where}{exc.message}") from None
    return schema


def path_problem(path: str, *, template: bool = False) -> str | None:
    """Why `path` (a glob, or with `template` an output path template) is not a path inside the
    project, or None. Only the text is checked: a template's expressions, and symlinks, are
    checked when the path is used (`paths.Policy`, `jobs.glob_files`)."""
    literal = _TEMPLATE_CODE.split(path) if template else [path]
    unusable = _unusable(path, literal)
    if unusable:
        return unusable
    if literal[0].startswith("/"):
        return (
            f"{path!r} is an absolute path; paths are relative to the project root "
            "and may not start with '/'"
        )
    if literal[0].startswith("~"):
        return (
            f"{path!r} starts with '~'; paths are relative to the project root "
            "and '~' is not expanded"
        )
    if any(".." in _SEGMENT_BREAK.split(part) for part in literal):
        return (
            f"{path!r} leaves the project; paths are relative to the project root "
            "and may not contain '..'"
        )
    return None


NAME_MAX, PATH_MAX = 255, 4000  # bytes: Linux's limit on a name, and short of its 4,096 on a path


def _unusable(path: str, literal: list[str]) -> str | None:
    """What no file system takes: a control character (NUL above all), a name longer than
    NAME_MAX bytes, a path longer than PATH_MAX (in the text outside template code)."""
    control = _CONTROL.search(path)
    if control:
        return (
            f"{describe(path)} holds the control character U+{ord(control.group()):04X}, "
            "which a path may not"
        )
    names = [name for part in literal for name in part.split("/")]
    longest = max((len(name.encode("utf-8", "surrogatepass")) for name in names), default=0)
    if longest > NAME_MAX:
        return f"{describe(path)} has a name of {longest} bytes; a name has at most {NAME_MAX}"
    if sum(len(part.encode("utf-8", "surrogatepass")) for part in literal) > PATH_MAX:
        return f"{describe(path)} is longer than {PATH_MAX:,} bytes, more than a path may be"
    return None


def _in_project(path: str) -> str:
    problem = path_problem(path)
    if problem:
        raise refuse(problem)
    return path


def _glob(pattern: str) -> str:
    if any("**" in part and part != "**" for part in _in_project(pattern).split("/")):
        raise refuse(  # the file search (pathlib) refuses it; `a**b` would match as `a*b`
            f"{describe(pattern)} has '**' inside a path segment; '**' stands only as a whole "
            "segment (e.g. 'notes/**/*.md'), and '*' matches within one"
        )
    return pattern


def _template_in_project(path: str) -> str:
    problem = path_problem(path, template=True)
    if problem:
        raise refuse(problem)
    return path


def _own_directory(example: str) -> Any:
    """A directory inside the project that is not .git/ or .claw/ (the workspace, a watch
    task's done: folder)."""

    def check(path: str) -> str:
        top = PurePosixPath(_in_project(path)).parts[:1]
        if top and top[0] in (STATE_DIR, ".git"):
            raise refuse(
                f"{path!r} is in {top[0]}/, which tools may never write; "
                f"use a directory of its own, such as {example!r}"
            )
        if _GLOB_MAGIC.search(path):
            raise refuse(f"{path!r} is a glob; name one directory, such as {example!r}")
        return path.rstrip("/") or "."

    return check


def _url(url: str) -> str:
    if "@" in url:  # never echo it: `https://user:KEY@host` carries a secret
        raise refuse(f"credentials in the URL are refused: {KEY_ADVICE}")
    try:
        parts = urllib.parse.urlsplit(url)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # e.g. an unclosed '[' of an IPv6 address
        valid = False
    if not valid:
        raise refuse(
            f"expected an http:// or https:// URL such as 'http://localhost:11434/v1', "
            f"got {describe(url)}"
        )
    return url


def _env_name(value: str) -> str:
    if not _ENV_NAME.match(value) or value.startswith(_KEY_PREFIXES) or _random_looking(value):
        # Never echo the value: it is most likely a secret.
        raise refuse(
            f"this looks like an API key ({_mask(value)}), not the name of an environment "
            "variable; put the key in an environment variable and write its name here, "
            "e.g. api_key_env: MY_API_KEY"
        )
    return value


def _passed_env_name(value: str) -> str:
    if value.startswith(_KEY_PREFIXES) or _random_looking(value):
        raise refuse(  # never echo it: most likely a secret
            f"this looks like a secret ({_mask(value)}), not the name of an environment "
            "variable; list the names of variables for tool processes, e.g. env: [GITHUB_TOKEN]"
        )
    if not _ENV_NAME.match(value):
        raise refuse(
            f"{value!r} is not the name of an environment variable "
            "(letters, digits and '_', not starting with a digit)"
        )
    return value


def _random_looking(value: str) -> bool:
    kinds = [any(test(char) for char in value) for test in (str.isdigit, str.islower, str.isupper)]
    return len(value) >= 24 and all(kinds)


def _mask(secret: str) -> str:
    return f"'{secret[:3]}…'" if len(secret) >= 12 else "'…'"


Name = Annotated[str, AfterValidator(_name)]
ServerName = Annotated[str, AfterValidator(_server_name)]
McpCommand = Annotated[list[Annotated[str, AfterValidator(_argument)]], BeforeValidator(_command)]
HeaderName = Annotated[str, AfterValidator(_header)]
ToolName = Annotated[str, AfterValidator(_tool)]
GrantedTools = Annotated[
    list[Annotated[str, AfterValidator(_tool), AfterValidator(_granted)]],
    BeforeValidator(_one_or_many),
]
Globs = Annotated[list[str], BeforeValidator(_one_or_many)]
ProjectGlob = Annotated[str, AfterValidator(_glob)]
ProjectGlobs = Annotated[list[ProjectGlob], BeforeValidator(_one_or_many)]
PathTemplate = Annotated[str, AfterValidator(_template_in_project)]
PathTemplates = Annotated[list[PathTemplate], BeforeValidator(_one_or_many)]
Workspace = Annotated[str, AfterValidator(_own_directory("workspace"))]
ProjectDir = Annotated[str, AfterValidator(_own_directory("inbox/done"))]
BashPolicy = Annotated[list[str] | bool, BeforeValidator(_bash)]
CronExpr = Annotated[str, AfterValidator(_cron)]
TimeZone = Annotated[str, AfterValidator(_zone)]
JsonSchema = Annotated[dict[str, Any], AfterValidator(_json_schema)]
EnvName = Annotated[str, AfterValidator(_env_name)]
PassedEnvNames = Annotated[
    list[Annotated[str, AfterValidator(_passed_env_name)]], BeforeValidator(_one_or_many)
]
HttpUrl = Annotated[str, AfterValidator(_url)]
Size = Annotated[int, BeforeValidator(_size)]
OrEmpty = BeforeValidator(_none_as_empty)
