"""From a task's `model:` to an LLM: named providers, the default OpenAI environment,
and record/replay wrapping. The OpenAI adapter (and the `openai` import) is loaded only
when a model is really called."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from claw_batch import cancel
from claw_batch.config import Clawfile, resolve_model
from claw_batch.errors import LimitExceeded, TaskFailed

if TYPE_CHECKING:
    from claw_batch.llm.base import LLM
    from claw_batch.llm.batch import BatchLLM, BatchRun
    from claw_batch.llm.breaker import Breaker
    from claw_batch.llm.callstore import CallStore
    from claw_batch.llm.messages import ChatRequest, Completion
    from claw_batch.llm.workers import Pool

NO_KEY = "sk-no-key"  # what keyless local servers (Ollama, llama.cpp) are sent
DEFAULT_REQUEST_TIMEOUT = 300.0  # seconds per HTTP request; the job's timeout bounds the total


@dataclass(frozen=True)
class Mode:
    replay: bool = False
    record: bool = False
    cassettes: Path = Path("cassettes")
    batch: bool = False  # every task's calls through the provider's Batch API (--batch)
    batch_wait: float | None = None  # seconds a run waits for its batches (--batch-wait)
    cache: bool = True  # False: `--no-cache` (a replay never uses the call cache)


def api_keys(config: Clawfile, environ: Mapping[str, str]) -> list[str]:
    """The API keys this project can use: redacted from every sink."""
    names = {"OPENAI_API_KEY"} | {p.api_key_env for p in config.providers.values() if p.api_key_env}
    return [environ[n] for n in sorted(names) if environ.get(n)]


@dataclass(frozen=True)
class MissingKey:
    """A provider whose `api_key_env` names a variable the environment does not set."""

    provider: str
    variable: str
    tasks: tuple[str, ...]  # the tasks that call it

    def __str__(self) -> str:
        return self.said()

    def said(self, *, replay: bool = True) -> str:
        """`replay`: offer recorded replies, which need no key (a git hook cannot replay)."""
        hint = " or run with --replay" if replay else ""
        return (
            f"environment variable {self.variable} is not set: provider '{self.provider}' "
            f"reads its API key from it (api_key_env), for tasks {', '.join(self.tasks)}; "
            f"set it (export {self.variable}=...){hint}"
        )


def missing_keys(
    config: Clawfile,
    environ: Mapping[str, str],
    tasks: Iterable[str],
    *,
    model: str | None = None,
) -> list[MissingKey]:
    """The providers that `tasks` (with `model` for every task, as `--model` gives) would
    call and whose key variable is unset: found before any job, not by the first one that
    fails. The default endpoint is left out: a keyless local server needs no
    $OPENAI_API_KEY."""
    callers: dict[str, list[str]] = {}
    for name in tasks:
        chosen = model or config.tasks[name].model or config.model
        provider_name, provider, _ = resolve_model(config, chosen)
        env = provider.api_key_env if provider is not None else None
        if env and not environ.get(env):
            callers.setdefault(provider_name, []).append(name)
    return [
        MissingKey(p, config.providers[p].api_key_env or "", tuple(names))
        for p, names in callers.items()
    ]


@dataclass(frozen=True)
class EndpointSpec:
    """An endpoint as plain values: what `Models` and a worker process build its adapter
    from. It names the variable that holds the API key, never the key."""

    provider: str  # its name in the clawfile, for messages
    base_url: str | None
    key_env: str | None  # None: a keyless server (NO_KEY is sent)
    stream: bool = False
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    base_url_from: str = "the base URL"  # where a user changes it, for messages
    key_required: bool = True  # False: the default endpoint, which works without a key

    def key(self, environ: Mapping[str, str]) -> str | None:
        if self.key_env is None:
            return NO_KEY
        key = environ.get(self.key_env)
        if not key and self.key_required:
            raise TaskFailed(
                f"provider '{self.provider}': environment variable "
                f"{self.key_env} is not set (it should hold the API key)"
            )
        if key and not key.isprintable():  # it goes into a header: a CR or LF would end it
            raise TaskFailed(
                f"environment variable {self.key_env} holds a line break or another control "
                "character: an API key cannot; check how it was set (a file saved with "
                "Windows line endings leaves a CR at its end)"
            )
        return key

    def build(self, key: str | None, breaker: Breaker) -> LLM:
        from claw_batch.llm.openai_compat import OpenAICompatLLM

        return OpenAICompatLLM(
            base_url=self.base_url,
            api_key=key,
            stream=self.stream,
            request_timeout=self.request_timeout,
            breaker=breaker,
            base_url_from=self.base_url_from,
        )


def endpoint_spec(
    config: Clawfile,
    environ: Mapping[str, str],
    provider_name: str,
    clawfile: str = "clawfile.yaml",
) -> EndpointSpec:
    """The endpoint that serves `provider_name`: a provider of the clawfile (named
    `clawfile` in messages), or the default one at $OPENAI_BASE_URL with $OPENAI_API_KEY."""
    provider = config.providers.get(provider_name)
    if provider is None:
        return EndpointSpec(
            provider_name,
            environ.get("OPENAI_BASE_URL"),
            "OPENAI_API_KEY",
            base_url_from="$OPENAI_BASE_URL",
            key_required=False,
        )
    # Never fall back to OPENAI_API_KEY here: it would be sent to another host.
    return EndpointSpec(
        provider=provider_name,
        base_url=provider.base_url or environ.get("OPENAI_BASE_URL"),
        key_env=provider.api_key_env,
        stream=provider.stream,
        request_timeout=provider.timeout or DEFAULT_REQUEST_TIMEOUT,
        base_url_from=(
            f"providers.{provider_name}.base_url in {clawfile}"
            if provider.base_url
            else "$OPENAI_BASE_URL"
        ),
    )


class Models:
    def __init__(
        self,
        config: Clawfile,
        environ: Mapping[str, str],
        mode: Mode,
        *,
        redact: Callable[[str], str],
        workers: Pool | None = None,  # live endpoints' calls go to worker processes
        clawfile: str = "clawfile.yaml",  # its file's name, for messages (`claw run -f`)
    ) -> None:
        self.config = config
        self.clawfile = clawfile
        self.environ = environ
        self.mode = mode
        self.redact = redact  # cassettes are committed: no secret may reach them
        self.workers = workers
        self._cache: dict[tuple[str, bool], LLM] = {}
        # What batch endpoints need of the run (its journal, its id): set by the run that
        # has a batch task (llm.batch), before its first job.
        self.batch_run: BatchRun | None = None
        self._batches: list[BatchLLM] = []  # made for this run: closed when it ends
        # One per endpoint and key, whichever providers name them: they pace its retries
        # together and fail together when it refuses the key (llm.breaker).
        self._breakers: dict[tuple[str | None, str | None], Breaker] = {}
        self._lock = threading.Lock()
        self.cache_dir: Path | None = None  # the call cache's, when the run uses one
        self.calls: CallStore | None = None  # opened for the first live model
        self.day = ""  # the run's date, part of the call cache's keys
        self.warn: Callable[[str], None] = lambda _: None

    def use_cache(self, directory: Path, day: str, warn: Callable[[str], None]) -> None:
        """Answer from the call cache in `directory` what it holds (llm.callcache), with
        `day` in its keys; before any model is got."""
        if not self.mode.replay:
            self.cache_dir, self.day, self.warn = directory, day, warn

    @property
    def caching(self) -> bool:
        return self.cache_dir is not None

    def end_cache(self, max_size: int) -> None:
        """At the end of the run: the cache within `max_size` bytes, oldest-used out first."""
        calls, self.calls = self.calls, None
        if calls is None:
            return
        calls.close()
        from claw_batch.llm.callstore import prune

        try:
            prune(calls.directory, max_size=max_size)
        except Exception as e:  # sqlite3.Error, OSError: the next run tries again
            self.warn(f"claw: warning: the call cache could not be pruned: {e}")

    def get(self, model: str, *, batch: bool = False) -> tuple[LLM, str]:
        """The LLM that serves `model` and the model name the endpoint expects; `batch`:
        through the provider's Batch API (a task's `batch: true`, or --batch)."""
        provider_name, _, name = resolve_model(self.config, model)
        # One replayer serves every provider, batch or not.
        slot = ("", False) if self.mode.replay else (provider_name, batch)
        llm = self._cache.get(slot)  # built: no lock for the jobs that start meanwhile
        if llm is None:
            with self._lock:
                llm = self._cache.get(slot)
                if llm is None:
                    llm = self._cache[slot] = self._make(provider_name, batch)
        return llm, name

    def close(self, settled: Iterable[str] = ()) -> None:
        """The run is over: batch endpoints stop waiting, and say what they leave running;
        `settled`: the jobs whose results are recorded (their journalled replies go)."""
        jobs = frozenset(settled) if self._batches else frozenset()
        for llm in self._batches:
            llm.close(jobs)

    def _make(self, provider_name: str, batch: bool = False) -> LLM:
        if self.mode.replay:
            from claw_batch.llm.cassette import ReplayLLM

            return ReplayLLM(self.mode.cassettes, redact=self.redact)
        llm = self._batch_endpoint(provider_name) if batch else self._live(provider_name)
        if self.cache_dir is not None:  # inside a recording: it records replayed replies too
            llm = self._cached(llm, provider_name)
        if self.mode.record:
            from claw_batch.llm.cassette import RecordingLLM

            return RecordingLLM(llm, self.mode.cassettes, redact=self.redact)
        return llm

    def _cached(self, llm: LLM, provider_name: str) -> LLM:
        """`llm` answering from the call cache what it holds (called under the lock)."""
        from claw_batch.llm.callcache import CachedLLM, endpoint_identity
        from claw_batch.llm.callstore import CallStore

        assert self.cache_dir is not None
        if self.calls is None:
            self.calls = CallStore(self.cache_dir, warn=self.warn)
        base_url = endpoint_spec(self.config, self.environ, provider_name).base_url
        return CachedLLM(
            llm, self.calls, endpoint=endpoint_identity(base_url), day=self.day, redact=self.redact
        )

    def _batch_endpoint(self, provider_name: str) -> LLM:
        from claw_batch.llm.batch import BatchLLM

        spec = endpoint_spec(self.config, self.environ, provider_name, self.clawfile)
        llm = BatchLLM(spec, spec.key(self.environ), self.batch_run, redact=self.redact)
        self._batches.append(llm)
        return llm

    def _live(self, provider_name: str) -> LLM:
        llm = self._endpoint(provider_name)
        if self.workers is not None:
            spec = endpoint_spec(self.config, self.environ, provider_name, self.clawfile)
            key = spec.key(self.environ)
            llm = self.workers.proxy(spec, self._breaker(spec.base_url, key), llm)
        provider = self.config.providers.get(provider_name)
        if provider is not None and provider.max_concurrency:
            llm = Throttled(llm, provider.max_concurrency)
        return llm

    def _endpoint(self, provider_name: str) -> LLM:
        spec = endpoint_spec(self.config, self.environ, provider_name, self.clawfile)
        key = spec.key(self.environ)
        return spec.build(key, self._breaker(spec.base_url, key))

    def _breaker(self, base_url: str | None, key: str | None) -> Breaker:
        """Called under the lock (from `get`)."""
        from claw_batch.llm.breaker import Breaker

        slot = ((base_url or "").rstrip("/") or None, key or None)
        if slot not in self._breakers:
            self._breakers[slot] = Breaker()
        return self._breakers[slot]


class Throttled:
    """At most `limit` calls at a time to one provider, however many jobs run (-j)."""

    def __init__(self, inner: LLM, limit: int) -> None:
        self.inner = inner
        self._slots = threading.BoundedSemaphore(limit)

    def complete(self, request: ChatRequest, *, deadline: float) -> Completion:
        if not cancel.acquire(self._slots, deadline):
            raise LimitExceeded(
                "timeout: the job's deadline passed while it waited for the provider"
            )
        try:
            return self.inner.complete(request, deadline=deadline)
        finally:
            self._slots.release()
