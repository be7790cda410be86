"""endpoints.Models: one LLM per provider, built once and handed out without a lock."""

from __future__ import annotations

import threading

import pytest
from helpers import HANG

from claw_batch.config import Clawfile, Provider
from claw_batch.errors import TaskFailed
from claw_batch.llm.endpoints import Mode, Models

CONFIG = Clawfile(
    tasks={},
    providers={
        "local": Provider(base_url="http://127.0.0.1:9/v1"),
        "remote": Provider(base_url="http://127.0.0.1:9/v1", api_key_env="REMOTE_KEY"),
    },
)


def models(environ: dict[str, str] | None = None) -> Models:
    return Models(CONFIG, environ or {}, Mode(), redact=lambda text: text)


def test_one_llm_per_provider_whatever_the_model() -> None:
    m = models()
    first, name = m.get("local/qwen")
    again, other = m.get("local/llama")
    assert (first, name, other) == (again, "qwen", "llama")


def test_a_built_endpoint_is_handed_out_while_another_one_is_being_built() -> None:
    """The jobs that start while an endpoint is built do not wait for it (issue 17: ~130 ms
    each, 26 s summed over 200 jobs, when building meant making the SDK's client)."""
    m = models()
    built, _ = m.get("local/qwen")
    got: list[object] = []
    with m._lock:  # what building another endpoint holds
        job = threading.Thread(target=lambda: got.append(m.get("local/qwen")[0]))
        job.start()
        job.join(HANG)
        handed_out = not job.is_alive()
    job.join()
    assert handed_out
    assert got == [built]


def test_a_missing_key_fails_the_call_each_time() -> None:
    m = models()
    message = (
        "provider 'remote': environment variable REMOTE_KEY is not set (it should hold the API key)"
    )
    for _ in range(2):
        with pytest.raises(TaskFailed) as exc:
            m.get("remote/gpt")
        assert str(exc.value) == message
    assert models({"REMOTE_KEY": "sk-r"}).get("remote/gpt")[1] == "gpt"
