"""A provider's Files and Batches endpoints (OpenAI's Batch API, which Groq, Together,
OpenRouter and vLLM's batch runner speak too): upload a JSONL file of requests, create a
batch of it, look at the batch, download its output and error files.

The calls go through the `openai` SDK (imported, by the adapter, when the first one is made),
given the key and base URL the live adapter is given; its failures are said as the live
adapter says them: the endpoint, the status, the provider's words (redacted), and what to do
— a 401 names the variable the key came from, a 404 says the provider has no Batch API.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from claw_batch.errors import ModelError
from claw_batch.llm import failures
from claw_batch.llm.failures import ConnectionFailure, EndpointError, StatusFailure, shown_url
from claw_batch.safety.redact import Redactor

if TYPE_CHECKING:
    import openai

    from claw_batch.llm.endpoints import EndpointSpec

T = TypeVar("T")
DEFAULT_BASE_URL = "https://api.openai.com/v1"
NO_KEY = "sk-no-key"
ENDPOINT = "/v1/chat/completions"  # what each line of a batch calls
WINDOW = "24h"  # the only completion window the providers offer
TRANSIENT = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


class Unreachable(Exception):
    """The endpoint did not answer, or answered a status that waiting may fix: try later."""


class Gone(ModelError):
    """The batch (or file) is not known to the endpoint (HTTP 404)."""


@dataclass(frozen=True)
class BatchState:
    """A batch as the provider last described it."""

    id: str
    status: str  # validating | in_progress | finalizing | completed | expired | cancelled | ...
    output_file_id: str | None = None
    error_file_id: str | None = None
    total: int = 0
    completed: int = 0
    failed: int = 0
    errors: str = ""  # why a batch `failed` (its validation errors), in one line


class BatchAPI:
    def __init__(self, spec: EndpointSpec, key: str | None) -> None:
        self.spec = spec
        self.base_url = (spec.base_url or DEFAULT_BASE_URL).rstrip("/")
        self.shown = shown_url(self.base_url)
        self._key = key or NO_KEY
        self._redact = Redactor([key] if key else [])
        self._client: openai.OpenAI | None = None

    def upload(self, data: bytes) -> str:
        """The id of a new batch input file holding `data` (JSONL)."""
        file = self._call(
            "upload the batch file (POST /files)",
            lambda c: c.files.create(
                file=("claw-batch.jsonl", data, "application/jsonl"), purpose="batch"
            ),
        )
        return self._clean(file.id)

    def create(self, input_file_id: str) -> BatchState:
        """Tried once (the SDK does not retry it): a create whose answer is lost may have
        made the batch, and a second would bill the file twice (llm.batch looks first)."""
        batch = self._call(
            "create the batch (POST /batches)",
            lambda c: c.with_options(max_retries=0).batches.create(
                input_file_id=input_file_id,
                endpoint=ENDPOINT,  # type: ignore[arg-type]
                completion_window=WINDOW,  # type: ignore[arg-type]
            ),
        )
        return self._state(batch)

    def retrieve(self, batch_id: str) -> BatchState:
        what = f"look at batch {batch_id}"
        return self._state(self._call(what, lambda c: c.batches.retrieve(batch_id), known=True))

    def made_from(self, input_file_id: str) -> BatchState | None:
        """The batch made from this input file, if the provider made one: among its latest
        100 batches (what a run killed while creating it would find at its next start)."""
        what = "list the batches (GET /batches)"
        page = self._call(what, lambda c: c.batches.list(limit=100))
        for batch in getattr(page, "data", None) or []:
            if getattr(batch, "input_file_id", None) == input_file_id:
                return self._state(batch)
        return None

    def content(self, file_id: str) -> bytes:
        what = f"download file {file_id}"
        return self._call(what, lambda c: c.files.content(file_id).content, known=True)

    def close(self) -> None:
        """Its connections closed (a call still in flight fails)."""
        if self._client is not None:
            self._client.close()

    def _sdk(self) -> openai.OpenAI:
        if self._client is None:
            from claw_batch.llm.openai_compat import sdk_client

            self._client = sdk_client(self.base_url, self._key)
        return self._client

    def _call(self, what: str, fn: Callable[[openai.OpenAI], T], *, known: bool = False) -> T:
        """`known`: about a batch or file the endpoint made, which a 404 says is gone."""
        from claw_batch.llm.openai_compat import sdk_failures

        try:
            with sdk_failures():
                return fn(self._sdk())
        except StatusFailure as exc:
            raise self._status(what, exc, known) from None
        except ConnectionFailure as exc:
            hopeless = failures.hopeless(exc, self.base_url)
            if hopeless is not None:
                raise ModelError(
                    f"provider '{self.spec.provider}': could not {what}: {hopeless}; "
                    f"is the server running? check {self.spec.base_url_from}"
                ) from None
            raise Unreachable(f"{what}: {exc}") from None
        except EndpointError as exc:
            detail = self._redact(str(exc))
            raise ModelError(f"{self._where()}: could not {what}: {detail}") from None

    def _status(self, what: str, exc: StatusFailure, known: bool) -> Exception:
        status = exc.status
        detail = self._redact(failures.error_detail(exc.error, exc.fallback))
        said = f"{self._where()}: could not {what}: HTTP {status}: {detail}"
        if status == 404 and known:
            return Gone(said)
        if status == 404:
            return ModelError(
                f"{said}; provider '{self.spec.provider}' has no Batch API (OpenAI's Files and "
                "Batches endpoints) at this base URL: run its tasks without --batch and "
                "without `batch: true`, or use a provider that has one (OpenAI, Groq, "
                "Together, OpenRouter, vLLM's batch runner)"
            )
        if status == 401:
            variable = self.spec.key_env or "OPENAI_API_KEY"
            return ModelError(f"{said}; check the API key in ${variable}")
        if status in TRANSIENT and "insufficient_quota" not in (exc.code(), exc.type()):
            return Unreachable(said)
        if status == 403:
            return ModelError(f"{said}; the API key has no access to the Batch API")
        return ModelError(f"{said}; the request cannot succeed as it is")

    def _where(self) -> str:
        return f"provider '{self.spec.provider}' at {self.shown}"

    def _clean(self, given: object) -> str:
        """A provider's id (of a batch, a file) or status as claw journals and prints it: the
        key redacted, no control characters, at most 200 characters."""
        text = self._redact(str(given))
        return "".join(ch for ch in text if ch.isprintable())[:200]

    def _state(self, batch: object) -> BatchState:
        counts = getattr(batch, "request_counts", None)
        errors = getattr(batch, "errors", None)
        data = getattr(errors, "data", None) or []
        said = "; ".join(str(getattr(e, "message", "") or e) for e in data)
        output = getattr(batch, "output_file_id", None)
        error = getattr(batch, "error_file_id", None)
        return BatchState(
            id=self._clean(getattr(batch, "id", "")),
            status=self._clean(getattr(batch, "status", "")),
            output_file_id=self._clean(output) if output else None,
            error_file_id=self._clean(error) if error else None,
            total=_count(getattr(counts, "total", 0)),
            completed=_count(getattr(counts, "completed", 0)),
            failed=_count(getattr(counts, "failed", 0)),
            errors=" ".join(self._redact(said).split())[:300],
        )


def _count(given: object) -> int:
    return given if type(given) is int and 0 <= given < 10**9 else 0
