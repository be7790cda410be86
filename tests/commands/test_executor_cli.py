"""`claw run --executor ray` and the clawfile's `executor:` as the command line sees them: the
usage errors (exit 2, said before anything is written), the dry run that names the cluster and
never connects, and which choice wins."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, text
from helpers import claw, make_project

RAY = "executor: {kind: ray, address: '10.9.9.9:6379'}\n"
CLAWFILE = """
    version: 1
    model: fake-model
    tasks:
      a:
        prompt: hi
        output: out/a.md
"""


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as srv:
        yield srv


@pytest.fixture
def env(server: FakeOpenAI) -> dict[str, str]:
    return {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test"}


@pytest.fixture
def no_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray as if not installed: `importlib.util.find_spec("ray")` finds nothing (and an
    `import ray` would fail)."""
    monkeypatch.setitem(sys.modules, "ray", None)


def project(tmp_path: Path, extra: str = "", tasks: str = "") -> Path:
    return make_project(tmp_path / "p", textwrap.dedent(CLAWFILE + tasks) + extra)


def untouched(root: Path) -> bool:
    """Nothing written: no .claw/, no output."""
    return not (root / ".claw").exists() and not (root / "out").exists()


def test_an_unknown_executor_is_a_usage_error(tmp_path: Path, env: dict[str, str]) -> None:
    root = project(tmp_path)
    r = claw(root, "run", "--executor", "k8s", env=env)
    assert r.exit_code == 2
    assert r.stderr == (
        "claw: run: --executor: 'k8s' is not one of 'local', 'ray'. See 'claw run -h'.\n"
    )
    assert untouched(root)


def test_address_without_ray_is_a_usage_error(tmp_path: Path, env: dict[str, str]) -> None:
    root = project(tmp_path)
    for args in (("--address", "10.0.0.5:6379"), ("--executor", "local", "--address", "auto")):
        r = claw(root, "run", *args, env=env)
        assert r.exit_code == 2
        assert r.stderr.startswith(f"claw: --address {args[-1]}: the address of a Ray cluster, ")
        assert "for --executor ray (or executor: {kind: ray} in the clawfile)" in r.stderr
    assert untouched(root)


def test_a_bad_address_is_a_usage_error(tmp_path: Path, env: dict[str, str]) -> None:
    root = project(tmp_path)
    r = claw(root, "run", "--executor", "ray", "--address", "head", env=env)
    assert r.exit_code == 2
    assert r.stderr == (
        "claw: --address 'head': expected 'auto' or HOST:PORT (the Ray head's address, "
        "e.g. 10.0.0.5:6379)\n"
    )
    assert untouched(root)


def test_address_goes_with_the_clawfiles_ray(tmp_path: Path, env: dict[str, str]) -> None:
    """--address alone overrides the clawfile's address when the clawfile says ray."""
    root = project(tmp_path, RAY)
    r = claw(root, "run", "-n", "--address", "127.0.0.1:7000", env=env)
    assert r.exit_code == 0, r.stderr
    assert "claw: the jobs would run on Ray at 127.0.0.1:7000 (--executor ray)\n" in r.stderr


@pytest.mark.usefixtures("no_ray")
def test_ray_not_installed_is_a_usage_error(tmp_path: Path, env: dict[str, str]) -> None:
    root = project(tmp_path)
    r = claw(root, "run", "--executor", "ray", env=env)
    assert r.exit_code == 2
    assert r.stderr == (
        "claw: --executor ray needs Ray, which is not installed here: "
        "pip install 'claw-batch[ray]'\n"
    )
    assert untouched(root)


@pytest.mark.usefixtures("no_ray")
def test_ray_not_installed_names_the_clawfiles_key(tmp_path: Path, env: dict[str, str]) -> None:
    root = project(tmp_path, RAY)
    r = claw(root, "run", env=env)
    assert r.exit_code == 2
    assert r.stderr == (
        "claw: executor: {kind: ray} (clawfile.yaml) needs Ray, which is not installed here: "
        "pip install 'claw-batch[ray]'\n"
    )
    assert untouched(root)


@pytest.mark.usefixtures("no_ray")
def test_executor_local_overrides_the_clawfile(
    tmp_path: Path, server: FakeOpenAI, env: dict[str, str]
) -> None:
    """`--executor local` runs here, Ray or not, whatever the clawfile says."""
    root = project(tmp_path, RAY)
    server.enqueue(text("done"))
    r = claw(root, "run", "--executor", "local", env=env)
    assert r.exit_code == 0, r.stderr
    assert (root / "out/a.md").read_text() == "done\n"


def test_a_batch_run_is_refused(tmp_path: Path, env: dict[str, str]) -> None:
    root = project(tmp_path)
    r = claw(root, "run", "--executor", "ray", "--batch", env=env)
    assert r.exit_code == 2
    assert r.stderr == (
        "claw: --batch sends the calls through a Batch API from this machine; --executor ray "
        "runs the jobs elsewhere: use one or the other\n"
    )
    assert untouched(root)


def test_a_batch_task_is_refused_by_name(tmp_path: Path, env: dict[str, str]) -> None:
    root = project(tmp_path, RAY, "      b: {prompt: hi, batch: true}\n")
    r = claw(root, "run", "b", env=env)
    assert r.exit_code == 2
    assert r.stderr == (
        "claw: task 'b' has batch: true (its calls go through a Batch API from this machine), "
        "which executor: {kind: ray} (clawfile.yaml) does not do: run it with --executor local\n"
    )
    assert untouched(root)


def test_record_is_refused(tmp_path: Path, env: dict[str, str]) -> None:
    root = project(tmp_path)
    r = claw(root, "run", "--executor", "ray", "--record", env=env)
    assert r.exit_code == 2
    assert r.stderr == (
        "claw: --record writes cassettes from the calls this machine makes; --executor ray runs "
        "the jobs elsewhere: record with --executor local\n"
    )
    assert untouched(root)


def test_a_task_with_mcp_servers_is_refused_by_name(tmp_path: Path, env: dict[str, str]) -> None:
    servers = "mcp_servers:\n  tracker: {url: 'http://127.0.0.1:9/mcp'}\n"
    task = "      m: {prompt: hi, tools: [read, mcp.tracker.search]}\n"
    root = project(tmp_path, servers, task)
    r = claw(root, "run", "m", "--executor", "ray", env=env)
    assert r.exit_code == 2
    assert r.stderr == (
        "claw: task 'm' uses MCP servers (mcp.tracker.search), whose connections live in this "
        "process, which --executor ray does not do: run it with --executor local\n"
    )
    assert untouched(root)


def test_a_task_that_may_remember_is_refused_by_name(tmp_path: Path, env: dict[str, str]) -> None:
    root = project(tmp_path, "", "      r: {prompt: hi, tools: [read, remember]}\n")
    r = claw(root, "run", "r", "--executor", "ray", env=env)
    assert r.exit_code == 2
    assert r.stderr == (
        "claw: task 'r' may remember (MEMORY.md and the daily notes are written here, by "
        "claw), which --executor ray does not do yet: run it with --executor local\n"
    )
    assert untouched(root)


def test_every_refusal_is_said_at_once(tmp_path: Path, env: dict[str, str]) -> None:
    root = project(tmp_path, "", "      b: {prompt: hi, batch: true}\n")
    r = claw(root, "run", "a", "b", "--executor", "ray", "--record", env=env)
    assert r.exit_code == 2
    lines = r.stderr.splitlines()
    assert [line.split(" ")[1] for line in lines] == ["--record", "task"]


@pytest.mark.usefixtures("no_ray")
def test_a_dry_run_names_the_cluster_and_warns(tmp_path: Path, env: dict[str, str]) -> None:
    """-n never connects (Ray need not even be installed): it says where the jobs would run
    and what the run would refuse, and exits 0."""
    root = project(tmp_path, RAY, "      b: {prompt: hi, batch: true}\n")
    r = claw(root, "run", "-n", env=env)
    assert r.exit_code == 0, r.stderr
    assert r.stderr.startswith(
        "claw: the jobs would run on Ray at 10.9.9.9:6379 (executor: {kind: ray} "
        "(clawfile.yaml))\n"
        "claw: warning: executor: {kind: ray} (clawfile.yaml) needs Ray, which is not "
        "installed here: pip install 'claw-batch[ray]'\n"
        "claw: warning: task 'b' has batch: true"
    )
    assert not (root / ".claw" / "state.db").exists()


def test_replay_is_a_cluster_run(tmp_path: Path, env: dict[str, str]) -> None:
    """--replay runs on a cluster (cassettes/ ships with the project), and a batch: true
    task answered from cassettes sends no batch."""
    root = project(tmp_path, "", "      b: {prompt: hi, batch: true}\n")
    r = claw(root, "run", "-n", "--replay", "--executor", "ray", "--address", "auto", env=env)
    assert r.exit_code == 0, r.stderr
    assert r.stderr.startswith(
        "claw: the jobs would run on Ray (address auto: the cluster this machine is a node of) "
        "(--executor ray)\n"
    )
    assert "warning" not in r.stderr


def test_plan_names_the_cluster_without_connecting(tmp_path: Path, env: dict[str, str]) -> None:
    root = project(tmp_path, RAY)
    r = claw(root, "plan", env=env)
    assert r.exit_code == 0, r.stderr
    assert r.stderr == (
        "claw: the jobs would run on Ray at 10.9.9.9:6379 (executor: {kind: ray} (clawfile.yaml))\n"
    )
    assert r.stdout.startswith("run  ")


def test_asking_for_ray_imports_no_ray(tmp_path: Path) -> None:
    """Whether Ray is installed is asked without importing it: a dry run, or a run refused
    before it starts, never loads Ray (a second's import, and a cluster it may look for)."""
    import subprocess

    root = project(tmp_path, RAY, "      b: {prompt: hi, batch: true}\n")
    script = (
        "import sys\n"
        "from claw_batch.cli import main\n"
        "for args in (['run', '-n'], ['run', 'b'], ['plan']):\n"
        "    try:\n"
        "        main([*args, '-C', sys.argv[1]], standalone_mode=False)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "OPENAI_API_KEY": "sk-test"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]", done.stdout
    assert "task 'b' has batch: true" in done.stderr
