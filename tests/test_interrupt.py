"""Ctrl-C and SIGTERM end a real `claw run` process cleanly with exit 130."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, hang
from helpers import make_project


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_during_a_model_call(tmp_path: Path, signum: int) -> None:
    root = make_project(tmp_path / "p", "version: 1\ntasks:\n  t: {prompt: go, output: out.md}\n")
    with FakeOpenAI() as srv:
        srv.enqueue(hang(30))
        env = {**os.environ, "OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": "sk-x"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "claw_batch", "run", "--json"],
            cwd=root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 20
        while not srv.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        assert srv.requests, "claw never called the model"
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=10)
    assert proc.returncode == 130, stderr
    assert stderr.splitlines()[-1] == "claw: interrupted"
    assert not (root / "out.md").exists()
    db = sqlite3.connect(root / ".claw/state.db")
    assert db.execute("SELECT status, exit_code FROM runs").fetchall() == [("interrupted", 130)]
    assert db.execute("SELECT status FROM jobs").fetchall() == [("interrupted",)]
    db.close()
    (transcript,) = (root / ".claw/runs").rglob("t.jsonl")
    last = json.loads(transcript.read_text().splitlines()[-1])
    assert last["type"] == "end" and last["status"] == "interrupted"
