"""A run's results: held, spilled past SPILL, and a task's up-to-date jobs kept as one
block (claw_batch.run.results.UpToDate); read back in the order they ended."""

from __future__ import annotations

from claw_batch.plan.jobs import Job
from claw_batch.run import results
from claw_batch.run.results import JobResult, Results, UpToDate, not_run


def ran(n: int) -> JobResult:
    return not_run(Job("a", f"in/{n}.txt"), "skipped", (f"needs b, which failed {n}",))


def test_a_block_of_up_to_date_jobs_reads_back_in_its_place() -> None:
    jobs = [Job("t", f"in/{n:05}.txt") for n in range(10_000)]
    outputs = [f"out/{n:05}.md" if n % 3 else None for n in range(10_000)]
    block = UpToDate(jobs, outputs)
    assert len(block) == 10_000
    assert block[7] == not_run(jobs[7], "up-to-date", (), "out/00007.md")
    last = zip(jobs[-2:], outputs[-2:], strict=True)
    assert list(block[-2:]) == [not_run(j, "up-to-date", (), o) for j, o in last]

    kept = Results([ran(0), ran(1)])
    kept.extend(block)
    kept.extend(ran(n) for n in range(2, 2 + results.SPILL + 5))  # spilled past the block
    kept.extend(UpToDate([], []))
    paired = zip(jobs, outputs, strict=True)
    expected = [ran(0), ran(1), *(not_run(j, "up-to-date", (), o) for j, o in paired)]
    expected += [ran(n) for n in range(2, 2 + results.SPILL + 5)]
    assert len(kept) == len(expected)
    assert list(kept) == expected
    assert list(kept) == expected  # read twice
    assert kept.statuses == {"skipped", "up-to-date"}


def test_a_block_alone() -> None:
    jobs = [Job("t", "a"), Job("t", "b")]
    kept = Results()
    kept.extend(UpToDate(jobs, ["out/a.md", "out/b.md"]))
    assert [r.output for r in kept] == ["out/a.md", "out/b.md"]
    assert kept.statuses == {"up-to-date"}
    assert not Results().statuses and not list(Results())
