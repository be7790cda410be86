"""A fake `Cluster`/`Worker` at the executor seam (claw_batch.run.executor): what crosses to
a worker is pickled (and kept, for a test to grep for secrets), the work runs on a thread of
this process, its value pickled back. The worker's keys are its own environment's."""

from __future__ import annotations

import os
import pickle
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from claw_batch.agent.budget import Spend
from claw_batch.config import Clawfile
from claw_batch.llm.endpoints import Mode, Models


@dataclass(frozen=True)
class Handle:
    id: int


class FakeWorker:
    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.node = cluster.node

    def get(self, handle: object) -> Any:
        assert isinstance(handle, Handle)
        self.cluster.gets += 1
        return pickle.loads(self.cluster.objects[handle.id])

    def started(self, job: str) -> None:
        self.cluster.started.append(job)

    def models(
        self,
        config: Clawfile,
        mode: Mode,
        *,
        environ: Mapping[str, str],
        redact: Callable[[str], str],
        clawfile: str,
    ) -> Models:
        return Models(config, environ, mode, redact=redact, clawfile=clawfile)

    def spend(self) -> Spend | None:
        return self.cluster.spend


class SubWorker(FakeWorker):
    """A worker in another process: the objects it may get came with the call; no spend is
    shared across the process boundary (the real one is a Ray actor)."""

    def __init__(self, objects: dict[int, bytes], node: str) -> None:
        self.objects, self.node = objects, node

    def get(self, handle: object) -> Any:
        assert isinstance(handle, Handle)
        return pickle.loads(self.objects[handle.id])

    def started(self, job: str) -> None:
        pass

    def spend(self) -> Spend | None:
        return None


# What a worker process runs: the work and its args, pickled, on stdin; its value on stdout.
SUB = """
import pickle, sys
from fakecluster import SubWorker
fn, args, objects, node = pickle.load(sys.stdin.buffer)
try:
    out = ("value", fn(SubWorker(objects, node), *args))
except BaseException as e:
    out = ("error", e)
sys.stdout.buffer.write(pickle.dumps(out))
"""


@dataclass(frozen=True)
class Process:
    """How to start a worker process: a prefix (another user: AS_RUNNER), the interpreter,
    its environment (its own keys, its own TMPDIR)."""

    prefix: tuple[str, ...]
    python: str
    env: dict[str, str]


class FakeCall:
    def __init__(self, thread: threading.Thread, box: dict[str, Any]) -> None:
        self.thread, self.box = thread, box

    def result(self, started: Callable[[str], None] | None = None) -> Any:
        self.thread.join()
        if "error" in self.box:
            raise self.box["error"]
        return pickle.loads(self.box["value"])


class FakeCluster:
    def __init__(self, node: str = "127.0.0.1 (fake0001)", process: Process | None = None) -> None:
        self.node = node
        self.process = process  # None: the work runs on a thread of this process
        self.objects: dict[int, bytes] = {}
        self.sent: list[bytes] = []  # every put and call, as pickled
        self.started: list[str] = []
        self.shared: list[dict[str, Any]] = []
        self.spend: Spend | None = None
        self.gets = 0
        self.puts = 0
        self.closed = False
        self.fail: Callable[[str], BaseException | None] = lambda job: None  # instead of work
        self.after: Callable[[Path], None] | None = None  # run in each job's scratch
        self._lock = threading.Lock()

    def share(
        self, config: Clawfile, *, spend: Spend | None, cache_dir: Path | None, day: str
    ) -> None:
        self.spend = spend
        self.shared.append({"cache_dir": cache_dir, "day": day})

    def put(self, value: object) -> object:
        data = pickle.dumps(value)
        with self._lock:
            self.puts += 1
            self.sent.append(data)
            handle = Handle(len(self.objects))
            self.objects[handle.id] = data
        return handle

    def call(self, work: Callable[..., Any], *args: Any, job: str) -> FakeCall:
        payload = pickle.dumps((work, args))
        with self._lock:
            self.sent.append(payload)
        fn, shipped = pickle.loads(payload)
        box: dict[str, Any] = {}

        def run() -> None:
            failure = self.fail(job)
            if failure is not None:
                box["error"] = failure
                return
            if self.process is not None:
                self._in_process(fn, shipped, box)
                return
            try:
                box["value"] = pickle.dumps(fn(FakeWorker(self), *shipped))
            except BaseException as e:
                box["error"] = e

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return FakeCall(thread, box)

    def _in_process(self, fn: Callable[..., Any], args: Any, box: dict[str, Any]) -> None:
        assert self.process is not None
        with self._lock:
            objects = dict(self.objects)
        here = str(Path(__file__).parent)
        env = {**self.process.env}
        env["PYTHONPATH"] = ":".join(p for p in (here, env.get("PYTHONPATH", "")) if p)
        ran = subprocess.run(
            [*self.process.prefix, self.process.python, "-c", SUB],
            input=pickle.dumps((fn, args, objects, self.node)),
            env=env,
            capture_output=True,
            timeout=120,
            check=False,
        )
        if ran.returncode != 0:
            box["error"] = RuntimeError(ran.stderr.decode(errors="replace"))
            return
        kind, value = pickle.loads(ran.stdout)
        if kind == "error":
            box["error"] = value
        else:
            box["value"] = pickle.dumps(value)

    def nodes_of(self) -> Mapping[str, str]:
        return {}

    def close(self) -> None:
        self.closed = True

    def grep(self, secret: str) -> bool:
        """Whether `secret` is in anything sent to the cluster."""
        needle = secret.encode()
        return any(needle in blob for blob in self.sent)


def scratch_base() -> Path:
    return Path(os.environ["TMPDIR"]) / f"claw-ray-{os.getuid()}"
