"""Work the cluster tests send to workers (module-level: Ray sends functions by name; the
test nodes have this folder on PYTHONPATH)."""

from __future__ import annotations

import os
import time
from typing import Any

from claw_batch.agent.budget import JobBudget
from claw_batch.config import Clawfile
from claw_batch.llm.endpoints import Mode
from claw_batch.llm.messages import ChatRequest, Message
from claw_batch.llm.usage import Usage


def ask(worker: Any, job: str, config: Clawfile, model: str, prompt: str) -> tuple[str, str]:
    """One model call of `model` from a worker: (its answer, the node)."""
    worker.started(job)
    models = worker.models(config, Mode(), environ=os.environ, redact=str, clawfile="clawfile.yaml")
    llm, name = models.get(model)
    request = ChatRequest(name, (Message("user", prompt),), temperature=0, job=job)
    completion = llm.complete(request, deadline=time.monotonic() + 60)
    return completion.message.content or "", worker.node


def spend(worker: Any, job: str, task: str, model: str, usd: float) -> str:
    """Reserve `usd` against the run's caps and settle it as spent: 'ok' or the limit."""
    from claw_batch.errors import LimitExceeded

    worker.started(job)
    budget: JobBudget = worker.spend().job(task, model)
    try:
        budget.spend.reserve(task, budget.caps, usd)
    except LimitExceeded as e:
        return str(e)
    budget.spend.settle(task, usd, usd)
    _ = Usage
    return "ok"


def echo(worker: Any, value: object) -> object:
    return value


def size(worker: Any, handle: object) -> int:
    return len(worker.get(handle))


def node(worker: Any, job: str, pause: float) -> str:
    worker.started(job)
    time.sleep(pause)
    return str(worker.node)


def env(worker: Any, name: str) -> str | None:
    return os.environ.get(name)
