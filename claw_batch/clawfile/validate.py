"""clawfile.yaml validated strictly (SPEC §2); claw_batch.clawfile.load finds it, and takes
it from the cache while it is current.

This is the only place that uses pydantic: the models below describe the file, and every
validation error is turned into `clawfile.yaml:LINE: key.path: message`. Checks that span
tasks or read other files (needs, cycles, templates) live in claw_batch.clawfile.checks
and claw_batch.clawfile.templates.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    model_validator,
)
from pydantic_core import ErrorDetails

from claw_batch.clawfile import checks, fielderrors, mcpchecks
from claw_batch.clawfile.fielderrors import describe
from claw_batch.clawfile.fields import (
    KEY_ADVICE,
    BashPolicy,
    CronExpr,
    EnvName,
    Globs,
    GrantedTools,
    HeaderName,
    HttpUrl,
    JsonSchema,
    McpCommand,
    Name,
    OrEmpty,
    PassedEnvNames,
    PathTemplate,
    PathTemplates,
    ProjectDir,
    ProjectGlob,
    ProjectGlobs,
    ServerName,
    Size,
    TimeZone,
    ToolName,
    Workspace,
    refuse,
)
from claw_batch.clawfile.yamlsource import Problem, YamlSource, load_yaml, problems_error
from claw_batch.config import Clawfile, Project, address_problem
from claw_batch.errors import ClawfileError
from claw_batch.plan import templatecheck
from claw_batch.toolnames import READ_ONLY_TOOLS


class _Strict(BaseModel):
    # allow_inf_nan: `temperature: .inf` (or "1e400") would pass, and crash the request.
    model_config = ConfigDict(
        frozen=True, extra="forbid", populate_by_name=True, allow_inf_nan=False
    )


class ProviderModel(_Strict):
    base_url: HttpUrl | None = None  # required but for "openai" (checks)
    api_key_env: EnvName | None = None
    max_concurrency: PositiveInt | None = None
    stream: bool = False
    timeout: PositiveFloat | None = None

    refused_keys: ClassVar[dict[str, str]] = {
        "api_key": f"literal API keys are refused: {KEY_ADVICE}"
    }


class PermissionsModel(_Strict):
    write: ProjectGlobs = []
    bash: BashPolicy = False
    network: bool = False
    env: PassedEnvNames = []


class UntrustedModel(_Strict):
    """What a job of the task keeps, beyond the read-only tools, once it has read content
    from outside the project (claw_batch.taint.jobtaint)."""

    allow: GrantedTools = []


class BudgetModel(_Strict):
    max_tokens: PositiveInt | None = None  # per job run
    max_usd: PositiveFloat | None = None  # per job run
    per_day: PositiveFloat | None = None  # USD, all runs of the task in the last 24 hours
    per_week: PositiveFloat | None = None  # USD, all runs of the task in the last 7 days


class LimitsModel(_Strict):
    """What one sandboxed bash call may use, all its processes together."""

    memory: Size | None = None  # None: the sandbox's default
    disk: Size | None = None  # free space the write directories' filesystem may lose


class CacheModel(_Strict):
    """`cache:`: the call cache's bound."""

    max_size: Size | None = None  # None: 2G


CACHE_FORMS = "`cache: false` (no call cache) or `cache: {max_size: 2G}` (its bound)"


def _cache(value: object) -> object:
    """`cache:` is true, false or a mapping of CacheModel's keys: anything else is said
    once, with the forms it may take (not once per form pydantic tried)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, dict):
        unknown = [key for key in value if key not in CacheModel.model_fields]
        if unknown:
            raise refuse(f"unknown key {unknown[0]!r} under cache: expected {CACHE_FORMS}")
        try:  # here: a bad max_size said once, not beside "expected true or false"
            return CacheModel.model_validate(value)
        except ValidationError as e:
            error = e.errors()[0]
            raise refuse(f"{'.'.join(map(str, error['loc']))}: {error['msg']}") from None
    raise refuse(f"expected {CACHE_FORMS}, got {describe(value)}")


class McpServerModel(_Strict):
    """An entry of `mcp_servers:`: `command:` (stdio, started in the sandbox) or `url:`
    (streamable HTTP), not both."""

    command: McpCommand | None = None
    url: HttpUrl | None = None
    headers_env: dict[HeaderName, EnvName] = {}
    env: PassedEnvNames = []
    network: bool = False
    read_only: bool = False
    timeout: PositiveFloat = 60.0
    startup_timeout: PositiveFloat = 30.0
    sandbox: Literal["bubblewrap", "none"] = "bubblewrap"

    refused_keys: ClassVar[dict[str, str]] = {
        "headers": "literal headers are refused (they carry secrets): name the environment "
        "variable that holds each one with headers_env: {Authorization: TRACKER_TOKEN}",
    }


def _address(value: object) -> object:
    """`executor.address`: `auto` or the Ray head's HOST:PORT."""
    if isinstance(value, str):
        problem = address_problem(value)
        if problem is not None:
            raise refuse(problem)
    return value


class ExecutorModel(_Strict):
    """`executor:`: where jobs' tool loops run (config.Executor); `claw run --executor`
    and `--address` override it."""

    kind: Literal["local", "ray"] = "local"
    address: Annotated[str, AfterValidator(_address)] = "auto"
    # strict: `true` or "3" is not a count of retries; at most 100: Ray takes a C++ int
    max_retries: Annotated[int, Field(strict=True, ge=0, le=100)] = 3


EXECUTOR_FORM = "{kind: ray, address: auto} (kind: local is the default)"


def _executor(value: object) -> object:
    """`executor:` is a mapping: `executor: ray` is said with the form it takes."""
    if value is None or isinstance(value, dict):
        return {} if value is None else value
    raise refuse(f"expected a mapping such as {EXECUTOR_FORM}, got {describe(value)}")


class ProjectBudgetModel(_Strict):
    """The clawfile-wide cap: all tasks together."""

    per_day: PositiveFloat | None = None  # USD in the last 24 hours
    per_week: PositiveFloat | None = None  # USD in the last 7 days


class BatchPriceModel(_Strict):
    """USD per million tokens through the provider's Batch API (`batch: true` tasks)."""

    input: NonNegativeFloat
    output: NonNegativeFloat
    cached_input: NonNegativeFloat | None = None


class PriceModel(_Strict):
    """USD per million tokens, for models the built-in price table does not know (or to
    correct it)."""

    input: NonNegativeFloat
    output: NonNegativeFloat
    cached_input: NonNegativeFloat | None = None  # cached prompt tokens; default: input
    batch: BatchPriceModel | None = None  # through the Batch API; default: the prices above


def _one_or_many_str(value: object) -> object:
    return [value] if isinstance(value, str) else value  # `on: failed` is one event


class SmtpModel(_Strict):
    """`email.smtp:`: the server; its login by the names of the variables that hold it."""

    host: str
    port: Annotated[int, Field(strict=True, ge=1, le=65535)] = 587
    starttls: bool = False
    ssl: bool = False
    user_env: EnvName | None = None
    password_env: EnvName | None = None

    refused_keys: ClassVar[dict[str, str]] = {
        "user": "name the environment variable that holds the login with user_env: SMTP_USER",
        "password": "literal passwords are refused: name the environment variable that "
        "holds it with password_env: SMTP_PASSWORD",
    }


class EmailModel(_Strict):
    to: Annotated[list[str], BeforeValidator(_one_or_many_str), Field(min_length=1)]
    sender: str = Field(alias="from")
    smtp: SmtpModel
    attach: bool = False  # the output as an attachment (else the body)


NotifyEvent = Literal["failed", "limit", "ok", "changed", "always"]


class NotifyModel(_Strict):
    """An entry of `notify:` (config.Delivery): when, and one target."""

    on: Annotated[list[NotifyEvent], BeforeValidator(_one_or_many_str), Field(min_length=1)]
    webhook: HttpUrl | None = None
    url_env: EnvName | None = None
    format: Literal["json", "slack", "discord", "teams"] = "json"
    email: EmailModel | None = None
    command: McpCommand | None = None
    timeout: Annotated[float, Field(gt=0, le=600)] = 10.0
    retries: Annotated[int, Field(strict=True, ge=0, le=10)] = 2

    @model_validator(mode="before")
    @classmethod
    def _unquoted_on(cls, data: object) -> object:
        """YAML 1.1 reads an unquoted `on:` key as true (as GitHub Actions users write it)."""
        if isinstance(data, dict) and True in data and "on" not in data:
            data = {("on" if key is True else key): value for key, value in data.items()}
        return data

    @model_validator(mode="after")
    def _one_target(self) -> NotifyModel:
        targets = [
            name
            for name, set_ in (
                ("webhook", self.webhook is not None or self.url_env is not None),
                ("email", self.email is not None),
                ("command", self.command is not None),
            )
            if set_
        ]
        if len(targets) != 1:
            found = f"got {' and '.join(targets)}" if targets else "got none"
            raise refuse(
                "expected one target: webhook: URL (or url_env: VAR), email: {...} or "
                f"command: [...]; {found}"
            )
        if self.webhook is not None and self.url_env is not None:
            raise refuse("webhook: and url_env: both name the URL; keep one")
        return self


class DelegateModel(_Strict):
    """`delegate:`: the tasks the `delegate` tool may start, and how deep sub-jobs nest."""

    tasks: Annotated[list[Name], BeforeValidator(_one_or_many_str)] = []
    max_depth: Annotated[int, Field(strict=True, ge=1, le=5)] = 2


def _always(value: object) -> object:
    """`always:` true or false, or the MCP tools whose answers change (mcp.SERVER.TOOL)."""
    from claw_batch.clawfile.fields import refuse
    from claw_batch.mcp import names

    if isinstance(value, bool):
        return value
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise refuse(
            f"expected true, false or a list of MCP tools (mcp.SERVER.TOOL), got {describe(value)}"
        )
    for name in value:
        if not names.is_mcp(name):
            raise refuse(f"{name!r}: always: takes true, false or MCP tools (mcp.SERVER.TOOL)")
        try:
            names.split(name)
        except ValueError as e:
            raise refuse(str(e)) from None
    return value


class TaskSettingsModel(_Strict):
    """Every task key but `prompt`; also what `defaults:` holds."""

    description: str = ""
    inputs: ProjectGlobs = []
    output: PathTemplate | None = None
    outputs: PathTemplates = []
    needs: Globs = []
    foreach: ProjectGlob | None = None
    tools: list[ToolName] | None = None
    permissions: PermissionsModel = PermissionsModel()
    json_schema: JsonSchema | None = Field(default=None, alias="schema")
    schedule: CronExpr | None = None
    tz: TimeZone | None = None
    catch_up: Literal["once", "skip"] = "once"
    watch: ProjectGlobs = []
    done: ProjectDir | None = None
    failed: ProjectDir | None = None
    hook: Literal["pre-commit", "commit-msg", "pre-push"] | None = None
    check: bool = False
    on_error: Literal["block", "warn"] = "block"
    model: str | None = None
    temperature: NonNegativeFloat | None = None
    max_steps: PositiveInt = 30
    timeout: PositiveFloat = 600.0
    budget: BudgetModel | None = None
    always: Annotated[bool | list[str], BeforeValidator(_always)] = False
    batch: bool = False  # its model calls go through the provider's Batch API
    skills: list[str] | None = None
    sandbox: Literal["bubblewrap", "none"] = "bubblewrap"
    limits: LimitsModel | None = None
    notify: list[NotifyModel] | None = None  # None: the clawfile's; []: none
    delegate: DelegateModel | None = None

    refused_keys: ClassVar[dict[str, str]] = {
        "prompt": "'prompt' cannot have a default: each task sets its own",
        "untrusted": "'untrusted' cannot have a default: each task that may read outside "
        "content grants itself what it needs",
    }


class TaskModel(TaskSettingsModel):
    prompt: str
    untrusted: UntrustedModel | None = None


class ClawfileModel(_Strict):
    version: Literal[1] = 1
    model: str = "gpt-4o-mini"
    workspace: Workspace = "workspace"
    providers: Annotated[dict[Name, ProviderModel], OrEmpty] = {}
    defaults: Annotated[TaskSettingsModel, OrEmpty] = TaskSettingsModel()
    default: Globs | None = None
    tasks: dict[Name, TaskModel]
    prices: Annotated[dict[str, PriceModel], OrEmpty] = {}
    budget: ProjectBudgetModel | None = None
    cache: Annotated[bool | CacheModel, BeforeValidator(_cache)] = True
    mcp_servers: Annotated[dict[ServerName, McpServerModel], OrEmpty] = {}
    executor: Annotated[ExecutorModel, BeforeValidator(_executor)] = ExecutorModel()
    notify: list[NotifyModel] | None = None  # as `defaults: {notify: ...}`


@dataclass(frozen=True)
class Validated:
    document: dict[str, Any]  # the validated clawfile, defaults applied, as JSON
    variables: dict[str, frozenset[str]]  # per task, the template variables it reads
    config: Clawfile
    warnings: list[Problem]  # what is allowed but worth a second look (`claw validate`)


def validate(path: Path, root: Path) -> Validated:
    source = load_yaml(path, path.name)
    _check_document(source)
    model, problems = _validate(source)
    if model is not None:
        document = _without_unset_grants(_apply_defaults(model).model_dump(mode="json"))
        config = Clawfile.of(document)
        names = [str(name) for name in source.data["tasks"]]
        problems += checks.check(config, source, root, names=names)
    if problems or model is None:  # model is None only when there are problems
        raise problems_error(problems, source.name)
    variables = {
        name: templatecheck.task_variables(task, root) for name, task in config.tasks.items()
    }
    config = Clawfile.of(document, variables)
    warnings = checks.control_warnings(Project(root, path, config), source)
    warnings += mcpchecks.warnings(config, source)
    return Validated(document, variables, config, warnings)


def _check_document(source: YamlSource) -> None:
    """Refuse what would drown in per-key errors: no mapping at all, an unknown version."""
    data, name = source.data, source.name
    if data is None:
        raise ClawfileError(f"{name}: the file is empty; declare 'version: 1' and 'tasks:'")
    if not isinstance(data, dict):
        raise ClawfileError(f"{name}:1: expected a mapping of keys, got {describe(data)}")
    version = data.get("version", 1)
    if type(version) is not int or version != 1:
        raise ClawfileError(
            f"{name}:{source.line(('version',))}: version: unsupported clawfile version "
            f"{describe(version)}; this claw reads version 1"
        )


def _validate(source: YamlSource) -> tuple[ClawfileModel | None, list[Problem]]:
    """Validate; on errors, validate again without the keys that failed, so that the checks
    across tasks and of templates still run on the rest and all errors come out at once."""
    try:
        return ClawfileModel.model_validate(source.data), []
    except ValidationError as exc:
        errors = exc.errors()
        problems = fielderrors.problems(exc, ClawfileModel, source)
    rest = copy.deepcopy(source.data)
    for error in sorted(errors, key=_depth, reverse=True):  # a key before its mapping
        if not _drop(rest, error):
            return None, problems
    try:
        return ClawfileModel.model_validate(rest), problems
    except ValidationError:
        return None, problems


# How deep in the document a failed key is dropped: `tasks.a.tools[1]` -> `tasks.a.tools`.
_DROP_DEPTH = {"tasks": 3, "providers": 3, "defaults": 2, "prices": 2, "mcp_servers": 3}


def _depth(error: ErrorDetails) -> int:
    return sum(part != "[key]" for part in error["loc"])


def _drop(data: dict[str, Any], error: ErrorDetails) -> bool:
    """Remove the key that `error` is about, or the whole task (or provider...) when it lacks
    a required key. False when that would be the document itself."""
    loc = [part for part in error["loc"] if part != "[key]"]
    if error["type"] == "missing":
        loc.pop()
    loc = loc[: _DROP_DEPTH.get(str(loc[0]), 1)] if loc else []
    parent: Any = data
    for part in loc[:-1]:
        parent = parent.get(part) if isinstance(parent, dict) else None
    if not loc or not isinstance(parent, dict):
        return False
    parent.pop(loc[-1], None)
    return True


def _apply_defaults(config: ClawfileModel) -> ClawfileModel:
    if config.notify is not None:  # the clawfile-wide notify: is a default (checks refuses both)
        defaults = config.defaults.model_copy(update={"notify": config.notify})
        config = config.model_copy(update={"defaults": defaults})
    return config.model_copy(
        update={
            "tasks": {
                name: _with_defaults(task, config.defaults) for name, task in config.tasks.items()
            }
        }
    )


def _without_unset_grants(document: dict[str, Any]) -> dict[str, Any]:
    """A task without `untrusted:` is written as before that key existed: its definition, and
    so every job's fingerprint, stays what it was (an upgrade reruns nothing)."""
    for task in document["tasks"].values():
        for key in ("untrusted", "notify", "delegate"):
            if task.get(key) is None:
                task.pop(key, None)
    return document


def _with_defaults(task: TaskModel, defaults: TaskSettingsModel) -> TaskModel:
    """The task with the defaults it does not set. A watch task reads files from outside:
    it takes only the read-only tools of `defaults:`, none of its permissions and not its
    `sandbox: none`; whatever more it needs, it lists itself and grants in `untrusted:
    {allow: [...]}` (claw_batch.taint.jobtaint), which has no default."""
    unset = defaults.model_fields_set - task.model_fields_set
    update = {key: getattr(defaults, key) for key in unset}
    if update.get("watch", task.watch):
        update.pop("permissions", None)
        update.pop("sandbox", None)
        if defaults.tools is not None and "tools" in update:
            update["tools"] = [t for t in defaults.tools if t in READ_ONLY_TOOLS]
    return task.model_copy(update=update)
