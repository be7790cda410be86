"""What a cluster run refuses to ship, and what a worker's error ends: the job, never the run.

- A task whose commands get the network (`permissions.network: true`) would share its node's:
  Ray's own services listen there (GCS, the dashboard's job API, the client server) and run
  any code sent to them, without authentication, outside every sandbox, on any node — the
  coordinator's too. Refused: exit 2 before anything is written, and (a cluster handed to the
  Runner) the job fails before it is shipped.
- A task that runs bash with `sandbox: none` would run unconfined as the cluster's user, beside
  other jobs' scratch copies and the node's snapshot cache: refused the same way.
- A ClawError raised on a worker (its clawfile missing there, a limit, a usage error) fails
  that job; a LimitExceeded is a `limit` job. The others go on."""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, call, text, tool_calls
from fakecluster import FakeCluster
from helpers import claw, make_project
from test_shipped import coordinator_env, node, run, script, server  # noqa: F401

from claw_batch.clawfile.load import load_project
from claw_batch.errors import ClawfileError, LimitExceeded, UsageError
from claw_batch.run.executor import NETWORK_REFUSED, UNSANDBOXED_REFUSED
from claw_batch.run.results import RunSummary
from claw_batch.run.runner import Runner, RunOptions
from claw_batch.terminal.progress import Progress

NETWORK = """
    version: 1
    model: fake-model
    tasks:
      net:
        prompt: Do it.
        output: out/answer.md
        permissions: {bash: true, network: true, write: ["out/**"]}
"""
UNSANDBOXED = """
    version: 1
    model: fake-model
    tasks:
      raw:
        prompt: Do it.
        output: out/answer.md
        sandbox: none
        permissions: {bash: true, write: ["out/**"]}
"""


AT = ("--executor", "ray", "--address", "127.0.0.1:9")  # never reached: refused first


def untouched(root: Path) -> bool:
    return not (root / ".claw").exists() and not (root / "out").exists()


def test_a_network_task_is_refused_before_anything_is_written(
    tmp_path: Path,
    server: FakeOpenAI,  # noqa: F811
) -> None:
    root = make_project(tmp_path / "p", NETWORK)
    r = claw(root, "run", *AT, env=coordinator_env(server))
    assert r.exit_code == 2
    assert r.stderr == (
        "claw: task 'net' has permissions.network: true (its commands would reach Ray's services "
        "on their node, which run any code sent to them without authentication), which "
        "--executor ray does not do: run it with --executor local\n"
    )
    assert untouched(root)
    assert server.requests == []


def test_an_unsandboxed_bash_task_is_refused_before_anything_is_written(
    tmp_path: Path,
    server: FakeOpenAI,  # noqa: F811
) -> None:
    root = make_project(
        tmp_path / "p",
        textwrap.dedent(UNSANDBOXED) + "executor: {kind: ray, address: '127.0.0.1:9'}\n",
    )
    r = claw(root, "run", env=coordinator_env(server))
    assert r.exit_code == 2
    assert r.stderr == (
        "claw: task 'raw' runs bash with sandbox: none (its commands would run unconfined as "
        "the cluster's user, beside other jobs' copies and the node's snapshot cache), which "
        "executor: {kind: ray} (clawfile.yaml) does not do: run it with --executor local\n"
    )
    assert untouched(root)


def test_sandbox_none_without_bash_is_not_refused(tmp_path: Path, server: FakeOpenAI) -> None:  # noqa: F811
    root = make_project(
        tmp_path / "p",
        """
        version: 1
        model: fake-model
        tasks:
          a: {prompt: hi, output: out/a.md, sandbox: none, tools: [read]}
        """,
    )
    r = claw(root, "run", "-n", *AT, env=coordinator_env(server))
    assert r.exit_code == 0, r.stderr
    assert "warning" not in r.stderr


def test_a_dry_run_warns_of_both(tmp_path: Path, server: FakeOpenAI) -> None:  # noqa: F811
    root = make_project(
        tmp_path / "p",
        NETWORK + "      raw: {prompt: hi, sandbox: none, permissions: {bash: true}}\n",
    )
    r = claw(root, "run", "-n", *AT, env=coordinator_env(server))
    assert r.exit_code == 0, r.stderr
    warned = [line for line in r.stderr.splitlines() if "warning" in line]
    assert [line.split("'")[1] for line in warned] == ["net", "raw"]


def test_a_network_job_handed_to_a_cluster_fails_before_it_ships(
    tmp_path: Path,
    server: FakeOpenAI,  # noqa: F811
    node: Path,  # noqa: F811
) -> None:
    """The attacker's probe: with the host's network, the job's command reached 127.0.0.1
    (here the fake endpoint, standing in for the dashboard's job API on 8265)."""
    port = server.base_url.split(":")[2].split("/")[0]
    root = make_project(tmp_path / "p", NETWORK)
    command = (
        f"mkdir -p out; curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{port}/v1/models"
        " > out/reached.txt; true"
    )
    server.handler = script(tool_calls(call("bash", {"command": command})), text("done"))
    cluster = FakeCluster()
    summary = run(root, coordinator_env(server), cluster)
    assert summary.exit_code == 1
    [res] = summary.results
    assert (res.status, res.reason, res.error) == ("failed", "TaskFailed", NETWORK_REFUSED)
    assert not (root / "out").exists()
    assert server.requests == []  # no model call, no command
    assert cluster.sent == []  # nothing shipped


def test_an_unsandboxed_bash_job_handed_to_a_cluster_fails_before_it_ships(
    tmp_path: Path,
    server: FakeOpenAI,  # noqa: F811
    node: Path,  # noqa: F811
) -> None:
    root = make_project(tmp_path / "p", UNSANDBOXED)
    server.handler = script(tool_calls(call("bash", {"command": "echo x > out/x"})), text("done"))
    cluster = FakeCluster()
    summary = run(root, coordinator_env(server), cluster)
    assert summary.exit_code == 1
    [res] = summary.results
    assert (res.status, res.reason, res.error) == ("failed", "TaskFailed", UNSANDBOXED_REFUSED)
    assert server.requests == []
    assert cluster.sent == []


# --- a worker's error ends its job --------------------------------------------------------------

TWO = """
    version: 1
    model: fake-model
    tasks:
      a: {prompt: "Go.", output: out/a.md}
      b: {prompt: "Go.", output: out/b.md}
"""


def keep_going(root: Path, server: FakeOpenAI, cluster: FakeCluster) -> RunSummary:  # noqa: F811
    """`claw run -k` with `cluster`: every job is tried."""
    quiet = Progress(io.StringIO(), quiet=True, tty=False, ticker=False)
    options = RunOptions(keep_going=True)
    env = coordinator_env(server)
    return Runner(load_project(root), options, progress=quiet, environ=env, cluster=cluster).run()


def test_a_clawerror_on_a_worker_fails_that_job_not_the_run(
    tmp_path: Path,
    server: FakeOpenAI,  # noqa: F811
    node: Path,  # noqa: F811
) -> None:
    """The attacker's probe: the clawfile is a symlink out of the project, which the snapshot
    leaves out; the worker's ClawfileError stopped the run (exit 2)."""
    shared = make_project(tmp_path / "shared", TWO)
    root = tmp_path / "p"
    root.mkdir()
    (root / "clawfile.yaml").symlink_to(shared / "clawfile.yaml")
    server.handler = script(text("done"))
    summary = keep_going(root, server, FakeCluster())
    assert summary.exit_code == 1, (summary.exit_code, summary.error)
    assert summary.error is None
    assert [(r.job.task, r.status, r.reason, r.error) for r in summary.results] == [
        (task, "failed", "ClawfileError", "clawfile.yaml: not in the project's copy on this worker")
        for task in ("a", "b")
    ]


@pytest.mark.parametrize(
    ("error", "status", "reason", "code"),
    [
        (ClawfileError("clawfile.yaml: tasks.a: unknown skill"), "failed", "ClawfileError", 1),
        (UsageError("no such tool here"), "failed", "UsageError", 1),
        (LimitExceeded("budget: per_day $1.00 spent"), "limit", "budget", 3),
    ],
)
def test_each_clawerror_from_a_worker_ends_only_its_job(
    tmp_path: Path,
    server: FakeOpenAI,  # noqa: F811
    node: Path,  # noqa: F811
    error: Exception,
    status: str,
    reason: str,
    code: int,
) -> None:
    root = make_project(tmp_path / "p", TWO)
    server.handler = script(text("done"))
    cluster = FakeCluster()
    cluster.fail = lambda job: error if job == "a" else None
    summary = keep_going(root, server, cluster)
    assert summary.exit_code == code, (summary.exit_code, summary.error)
    assert summary.error is None
    got = {r.job.task: (r.status, r.reason, r.error) for r in summary.results}
    assert got == {"a": (status, reason, str(error)), "b": ("ok", None, None)}
    assert (root / "out/b.md").read_text() == "done\n"
