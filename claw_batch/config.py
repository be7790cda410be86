"""The validated clawfile as plain, frozen values: what every command works with.

`clawfile` validates the YAML with pydantic and hands over a JSON document of the result;
this module turns that document into the classes below. It imports neither pydantic nor
YAML nor Jinja2, so a run whose clawfile has not changed (see claw_batch.clawfile.cache) loads in
microseconds instead of importing a validation stack.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from claw_batch.errors import ClawfileError
from claw_batch.toolnames import DEFAULT_TOOLS

KeyPath = tuple[str | int, ...]  # where a value is in the clawfile: ('tasks', 'x', 'tools', 2)


def dotted(path: KeyPath) -> str:
    """`('tasks', 'x', 'tools', 2)` -> `tasks.x.tools[2]`."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text


# A file of these names is a clawfile wherever it is (`claw run` looks for one upwards from
# where it starts): no tool writes one anywhere (claw_batch.safety.paths).
CLAWFILE_NAMES = ("clawfile.yaml", "clawfile.yml")
PROMPT_SUFFIXES = (".md", ".j2", ".txt")

JsonDict = dict[str, Any]


def _strs(value: Any) -> tuple[str, ...]:
    return tuple(value or ())


@dataclass(frozen=True)
class Provider:
    base_url: str | None = None
    api_key_env: str | None = None
    max_concurrency: int | None = None
    stream: bool = False
    timeout: float | None = None

    @classmethod
    def of(cls, data: JsonDict) -> Provider:
        return cls(**data)


@dataclass(frozen=True)
class Permissions:
    write: tuple[str, ...] = ()
    bash: bool | tuple[str, ...] = False  # True, or command patterns
    network: bool = False
    env: tuple[str, ...] = ()  # environment variables tool processes get besides the base ones

    @classmethod
    def of(cls, data: JsonDict) -> Permissions:
        bash = data["bash"]
        bash = bash if isinstance(bash, bool) else _strs(bash)
        return cls(_strs(data["write"]), bash, data["network"], _strs(data["env"]))


@dataclass(frozen=True)
class Budget:
    max_tokens: int | None = None  # per job run
    max_usd: float | None = None  # per job run
    per_day: float | None = None  # USD, all runs of the task in a day
    per_week: float | None = None  # USD, all runs of the task in 7 days

    @classmethod
    def of(cls, data: JsonDict | None) -> Budget | None:
        return None if data is None else cls(**data)


@dataclass(frozen=True)
class CallLimits:
    """`limits:`: what one sandboxed bash call may use; None: the sandbox's default."""

    memory: int | None = None  # bytes, all the call's processes together
    disk: int | None = None  # bytes of free space its write directories may lose

    @classmethod
    def of(cls, data: JsonDict | None) -> CallLimits:
        return cls() if data is None else cls(**data)


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input: float
    output: float
    cached_input: float | None = None  # cached prompt tokens; None: the input price
    batch: Price | None = None  # through the provider's Batch API; None: not known

    @classmethod
    def of(cls, data: JsonDict) -> Price:
        batch = data.get("batch")
        return cls(
            data["input"],
            data["output"],
            data.get("cached_input"),
            None if batch is None else cls(**batch),
        )


NOTIFY_EVENTS = ("failed", "limit", "ok", "changed", "always")
WEBHOOK_FORMATS = ("json", "slack", "discord", "teams")


@dataclass(frozen=True)
class Smtp:
    """`email.smtp:`: the server a delivery by e-mail goes through (standard library SMTP).
    The login comes from environment variables, by name: never a secret in the clawfile."""

    host: str
    port: int = 587
    starttls: bool = False  # STARTTLS after connecting (port 587)
    ssl: bool = False  # TLS from the start (port 465)
    user_env: str | None = None
    password_env: str | None = None

    @classmethod
    def of(cls, data: JsonDict) -> Smtp:
        return cls(**data)


@dataclass(frozen=True)
class Delivery:
    """An entry of `notify:`: when (`on`) a task's result is sent, and where: one target of
    `kind` webhook (`url` or `url_env`, in `format`), email (`to`, `sender` (`from:`),
    `smtp`) or command (`command`, the payload as JSON on stdin). claw_batch.notify sends
    it; claw_batch.run.notices decides when."""

    on: tuple[str, ...]  # NOTIFY_EVENTS
    kind: str  # webhook | email | command
    url: str | None = None
    url_env: str | None = None  # the variable that holds the URL (a secret: Slack's is)
    format: str = "json"  # WEBHOOK_FORMATS
    to: tuple[str, ...] = ()
    sender: str | None = None  # `from:`
    smtp: Smtp | None = None
    attach: bool = False  # email: the output as an attachment, not the body
    command: tuple[str, ...] = ()
    timeout: float = 10.0  # seconds for one attempt
    retries: int = 2  # attempts after the first, with backoff, within the run

    @property
    def target(self) -> str:
        """What it is in messages and the ledger, with nothing secret: a webhook by its
        host (its path is often the secret), an e-mail by its first recipient, a command
        by its program."""
        if self.kind == "webhook":
            if self.url_env:
                return f"webhook ${self.url_env}"
            import urllib.parse

            try:
                host = urllib.parse.urlsplit(self.url or "").hostname
            except ValueError:  # `http://[::1`: send() says what is wrong with it
                host = None
            return f"webhook {host or '?'}"
        if self.kind == "email":
            more = f" (+{len(self.to) - 1})" if len(self.to) > 1 else ""
            return f"email {self.to[0] if self.to else '?'}{more}"
        return f"command {self.command[0] if self.command else '?'}"

    @classmethod
    def of(cls, data: JsonDict) -> Delivery:
        """From a validated `notify:` entry (clawfile.validate.NotifyModel)."""
        email, command = data.get("email"), data.get("command")
        kind = "email" if email else "command" if command else "webhook"
        email = email or {}
        smtp = email.get("smtp")
        return cls(
            on=_strs(data["on"]),
            kind=kind,
            url=data.get("webhook"),
            url_env=data.get("url_env"),
            format=data.get("format", "json"),
            to=_strs(email.get("to")),
            sender=email.get("sender"),
            smtp=None if smtp is None else Smtp.of(smtp),
            attach=email.get("attach", False),
            command=_strs(command),
            timeout=data.get("timeout", 10.0),
            retries=data.get("retries", 2),
        )


@dataclass(frozen=True)
class Delegation:
    """`delegate:`: the tasks a job of the task may start as sub-jobs with the `delegate`
    tool (listed in `tools:`), and how deep sub-jobs may nest (a sub-job's own sub-jobs are
    depth 2). An ad-hoc sub-job (`delegate(prompt=...)`) needs no task listed."""

    tasks: tuple[str, ...] = ()
    max_depth: int = 2

    @classmethod
    def of(cls, data: JsonDict | None) -> Delegation:
        return cls() if not data else cls(_strs(data.get("tasks")), data.get("max_depth", 2))


@dataclass(frozen=True)
class Task:
    """A task with `defaults:` applied. (`defaults:` itself is a Task with an empty prompt.)"""

    prompt: str = ""
    description: str = ""
    inputs: tuple[str, ...] = ()
    output: str | None = None
    outputs: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()
    foreach: str | None = None
    tools: tuple[str, ...] | None = None
    permissions: Permissions = Permissions()
    json_schema: Mapping[str, Any] | None = None
    schedule: str | None = None
    tz: str | None = None
    catch_up: str = "once"
    watch: tuple[str, ...] = ()
    done: str | None = None  # watch: where a file that was processed is moved
    failed: str | None = None  # watch: where a file whose job failed is moved
    hook: str | None = None
    check: bool = False
    on_error: str = "block"  # block | warn: does a model that cannot be reached fail the run
    model: str | None = None
    temperature: float | None = None
    max_steps: int = 30
    timeout: float = 600.0
    budget: Budget | None = None
    # True: never up to date; MCP tool patterns: not up to date after a run that called one
    always: bool | tuple[str, ...] = False
    batch: bool = False  # its model calls go through the provider's Batch API
    skills: tuple[str, ...] | None = None
    sandbox: str = "bubblewrap"  # bubblewrap | none: how bash runs
    limits: CallLimits = CallLimits()
    # What a job keeps beyond the read-only tools once it has read outside content
    # (`untrusted: {allow: [...]}`; claw_batch.taint.jobtaint).
    untrusted_allow: tuple[str, ...] = ()
    notify: tuple[Delivery, ...] = ()  # `notify:` (the clawfile's when the task sets none)
    delegate: Delegation = Delegation()
    # What the definition is as a document (for the fingerprint), and the template variables
    # its prompt and output paths read (None: not known); neither is a setting.
    definition: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    variables: frozenset[str] | None = field(default=None, compare=False, repr=False)

    @property
    def item_globs(self) -> tuple[str, ...]:
        """What a job's item matches: the `foreach:` glob, else (a watch task) the watched
        globs; none for a task that is one job."""
        return (self.foreach,) if self.foreach is not None else self.watch

    @property
    def fans_out(self) -> bool:
        return bool(self.item_globs)

    @property
    def tool_names(self) -> tuple[str, ...]:
        return DEFAULT_TOOLS if self.tools is None else self.tools

    @property
    def offered_tools(self) -> tuple[str, ...]:
        """What its jobs are offered: `tools:`, and bash with `permissions.bash`."""
        bash = ("bash",) if self.permissions.bash and "bash" not in self.tool_names else ()
        return (*self.tool_names, *bash)

    @classmethod
    def of(cls, data: JsonDict, variables: frozenset[str] | None = None) -> Task:
        tools = data.get("tools")
        skills = data.get("skills")
        return cls(
            prompt=data.get("prompt", ""),
            description=data["description"],
            inputs=_strs(data["inputs"]),
            output=data["output"],
            outputs=_strs(data["outputs"]),
            needs=_strs(data["needs"]),
            foreach=data["foreach"],
            tools=None if tools is None else _strs(tools),
            permissions=Permissions.of(data["permissions"]),
            json_schema=data["json_schema"],
            schedule=data["schedule"],
            tz=data["tz"],
            catch_up=data["catch_up"],
            watch=_strs(data["watch"]),
            done=data["done"],
            failed=data["failed"],
            hook=data["hook"],
            check=data["check"],
            on_error=data["on_error"],
            model=data["model"],
            temperature=data["temperature"],
            max_steps=data["max_steps"],
            timeout=data["timeout"],
            budget=Budget.of(data["budget"]),
            always=_always(data["always"]),
            batch=data.get("batch", False),
            skills=None if skills is None else _strs(skills),
            sandbox=data["sandbox"],
            limits=CallLimits.of(data["limits"]),
            untrusted_allow=_strs((data.get("untrusted") or {}).get("allow")),
            notify=tuple(Delivery.of(d) for d in data.get("notify") or ()),
            delegate=Delegation.of(data.get("delegate")),
            definition=data,
            variables=variables,
        )


def _always(value: Any) -> bool | tuple[str, ...]:
    return value if isinstance(value, bool) else _strs(value)


@dataclass(frozen=True)
class CallCache:
    """`cache:`: the call cache (llm.callcache); `cache: false` turns it off."""

    enabled: bool = True
    max_size: int = 2 << 30  # bytes of replies kept

    @classmethod
    def of(cls, data: object) -> CallCache:
        if data is False:
            return cls(enabled=False)
        if isinstance(data, dict):
            return cls(max_size=data.get("max_size") or cls.max_size)
        return cls()


@dataclass(frozen=True)
class Executor:
    """`executor:`: where jobs' tool loops run. `local` (the default): threads of the
    `claw run` process. `ray`: tasks on a Ray cluster at `address` ("auto": the cluster this
    machine is a node of; "HOST:PORT": its head), the coordinator keeping every write
    (claw_batch.cluster, claw_batch.run.shipped). `max_retries`: how many times Ray runs a job
    again elsewhere when its worker process or node dies."""

    kind: str = "local"  # local | ray
    address: str = "auto"
    max_retries: int = 3

    @property
    def remote(self) -> bool:
        return self.kind == "ray"

    @classmethod
    def of(cls, data: JsonDict | None) -> Executor:
        if not data:  # a document kept by an older claw, or no `executor:`
            return cls()
        return cls(data["kind"], data["address"], data["max_retries"])


EXECUTOR_KINDS = ("local", "ray")
ADDRESS_FORM = "expected 'auto' or HOST:PORT (the Ray head's address, e.g. 10.0.0.5:6379)"


def address_problem(address: str) -> str | None:
    """What is wrong with a Ray address (`executor.address`, `--address`); None: nothing.
    `auto`, or HOST:PORT: a host name, an IPv4 address or a [bracketed] IPv6 one."""
    if address == "auto":
        return None
    host, sep, port = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1].replace(":", "")  # an IPv6 address: its colons are its own
    ok = bool(sep) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.-]*", host) is not None
    if not (ok and port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        return f"{address!r}: {ADDRESS_FORM}"
    return None


@dataclass(frozen=True)
class McpServer:
    """An entry of `mcp_servers:`: a stdio server claw starts (`command`), or a streamable
    HTTP one it connects to (`url`). Exactly one of the two is set."""

    command: tuple[str, ...] = ()
    url: str | None = None
    headers_env: Mapping[str, str] = field(default_factory=dict)  # header -> env var name
    env: tuple[str, ...] = ()  # environment variables the server process gets
    network: bool = False  # a stdio server's sandbox keeps the network
    read_only: bool = False  # its tools stay with a job that read outside content
    timeout: float = 60.0  # seconds for one tool call (and the job's own timeout bounds it)
    startup_timeout: float = 30.0  # seconds to start and answer the handshake
    sandbox: str = "bubblewrap"  # bubblewrap | none: how a stdio server runs
    definition: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def kind(self) -> str:
        return "http" if self.url is not None else "stdio"

    @classmethod
    def of(cls, data: JsonDict) -> McpServer:
        return cls(
            command=_strs(data.get("command")),
            url=data.get("url"),
            headers_env=dict(data.get("headers_env") or {}),
            env=_strs(data.get("env")),
            network=data.get("network", False),
            read_only=data.get("read_only", False),
            timeout=data.get("timeout", 60.0),
            startup_timeout=data.get("startup_timeout", 30.0),
            sandbox=data.get("sandbox", "bubblewrap"),
            definition=data,
        )


@dataclass(frozen=True)
class Clawfile:
    tasks: Mapping[str, Task]
    model: str = "gpt-4o-mini"
    workspace: str = "workspace"
    providers: Mapping[str, Provider] = field(default_factory=dict)
    defaults: Task = Task()
    default: tuple[str, ...] | None = None
    prices: Mapping[str, Price] = field(default_factory=dict)
    budget: Budget | None = None  # the clawfile-wide per_day / per_week cap
    cache: CallCache = CallCache()
    mcp_servers: Mapping[str, McpServer] = field(default_factory=dict)
    executor: Executor = Executor()

    @functools.cached_property
    def delegators(self) -> Mapping[str, tuple[str, ...]]:
        """Per task that another lists in `delegate.tasks` (and offers the tool), the tasks
        that do (file order):
        a task run as a sub-job is not in the default set (claw_batch.plan.jobs)."""
        found: dict[str, list[str]] = {}
        for name, task in self.tasks.items():
            if "delegate" not in task.offered_tools:
                continue  # a `delegate:` from defaults, in a task that has not the tool
            for target in dict.fromkeys(task.delegate.tasks):
                found.setdefault(target, []).append(name)
        return {target: tuple(names) for target, names in found.items()}

    @functools.cached_property
    def untrusted(self) -> tuple[str, ...]:
        """Globs of the files that come from outside the project, whichever task reads them:
        what the watch tasks watch, everything else in the folders they watch (a dropped
        folder, a file the globs do not match), and the done:/failed: folders those files are
        moved to. A watch glob at the project root marks only what it matches. Once per
        clawfile: every job asks it several times."""
        from claw_batch.globs import fixed_dir

        found: list[str] = []
        for task in self.tasks.values():
            found += task.watch
            found += [f"{d}/**" for g in task.watch if (d := fixed_dir(g)) != "."]
            found += [f"{folder}/**" for folder in (task.done, task.failed) if folder]
        return tuple(dict.fromkeys(found))

    @classmethod
    def of(cls, data: JsonDict, variables: Mapping[str, frozenset[str]] | None = None) -> Clawfile:
        """From the validated document; `variables`: per task, the template variables it reads."""
        known = variables or {}
        default = data["default"]
        return cls(
            tasks={n: Task.of(t, known.get(n)) for n, t in data["tasks"].items()},
            model=data["model"],
            workspace=data["workspace"],
            providers={n: Provider.of(p) for n, p in data["providers"].items()},
            defaults=Task.of(data["defaults"]),
            default=None if default is None else _strs(default),
            prices={n: Price.of(p) for n, p in data["prices"].items()},
            budget=Budget.of(data["budget"]),
            cache=CallCache.of(data.get("cache", True)),  # .get: a document kept by an older claw
            mcp_servers={n: McpServer.of(m) for n, m in (data.get("mcp_servers") or {}).items()},
            executor=Executor.of(data.get("executor")),
        )


@dataclass(frozen=True)
class Project:
    root: Path
    clawfile: Path
    config: Clawfile

    def prompt_source(self, task_name: str) -> tuple[str, str]:
        """(template text, the name to show for it in messages)."""
        prompt = self.config.tasks[task_name].prompt
        file = prompt_file(prompt)
        if file is None:
            return prompt, f"{self.clawfile.name}:tasks.{task_name}.prompt"
        try:
            return (self.root / file).read_text(encoding="utf-8"), file
        except (OSError, UnicodeDecodeError) as exc:  # changed since the clawfile was loaded
            raise ClawfileError(f"tasks.{task_name}.prompt: cannot read {file!r}: {exc}") from None


def prompt_file(prompt: str) -> str | None:
    """The path in `prompt:` when it names a file; None when it is the template itself."""
    text = prompt.strip()
    if not text or any(char.isspace() for char in text):
        return None
    return text if text.endswith(PROMPT_SUFFIXES) or "/" in text else None


def provider_keys(config: Clawfile) -> dict[str, str]:
    """The environment variables that hold the providers' API keys, and whose they are."""
    keys = {"OPENAI_API_KEY": "openai"}
    keys |= {p.api_key_env: name for name, p in config.providers.items() if p.api_key_env}
    return keys


def resolve_model(config: Clawfile, model: str) -> tuple[str, Provider | None, str]:
    """`local/qwen2.5:7b` -> ("local", <provider>, "qwen2.5:7b") when `local` is declared;
    otherwise the whole string is a model name for the default "openai" endpoint (OpenRouter
    names such as `qwen/qwen-2.5-72b` contain a slash too)."""
    prefix, slash, rest = model.partition("/")
    if slash and prefix in config.providers:
        return prefix, config.providers[prefix], rest
    return "openai", config.providers.get("openai"), model


def find_clawfile(start: Path) -> Path:
    start = start.resolve()
    for directory in (start, *start.parents):
        for name in CLAWFILE_NAMES:
            if (directory / name).is_file():
                return directory / name
    raise ClawfileError(
        f"no clawfile.yaml in {start} or any parent directory; "
        "create one with `claw init` or pass -f FILE / -C DIR"
    )


def clawfile_path(directory: Path | None, file: Path | None) -> Path:
    """`-C DIR` starts the search in DIR; `-f FILE` names the file (relative to DIR if both)."""
    base = directory if directory is not None else Path.cwd()
    if file is None:
        return find_clawfile(base)
    path = (base / file).resolve()
    if not path.is_file():
        raise ClawfileError(f"{file}: no such file")
    return path
