"""The report page's style sheet, inlined into the page (system fonts: nothing is fetched)."""

CSS = """
:root { --fg: #1f2328; --dim: #656d76; --line: #d8dee4; --bg: #ffffff; --panel: #f6f8fa;
  --ok: #3a9a5b; --failed: #d64545; --limit: #e0952a; --interrupted: #8b6cc4;
  --error: #a61e4d; --skipped: #aab2bd; --running: #5b8fd1; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1100px; padding: 24px 28px 48px; color: var(--fg);
  background: var(--bg); font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto,
  "Helvetica Neue", Arial, sans-serif; }
h1 { font-size: 22px; margin: 0; }
h2 { font-size: 16px; margin: 28px 0 10px; padding-bottom: 4px;
  border-bottom: 1px solid var(--line); }
.sub, .dim { color: var(--dim); }
.sub { margin: 4px 0 0; }
.empty, .none { padding: 16px; background: var(--panel); border-radius: 6px; }
.totals { display: grid; grid-template-columns: repeat(4, 1fr); gap: 12px; margin-top: 20px; }
.card { background: var(--panel); border: 1px solid var(--line); border-radius: 8px;
  padding: 12px 14px; }
.card .label { color: var(--dim); font-size: 12px; text-transform: uppercase;
  letter-spacing: .04em; }
.card .value { font-size: 26px; font-weight: 600; margin: 2px 0 4px; }
.card .note { font-size: 12px; color: var(--dim); }
.chip { display: inline-block; padding: 0 7px; border-radius: 10px; font-size: 12px;
  line-height: 18px; color: #fff; background: var(--dim); white-space: nowrap; }
.s-ok { background: var(--ok); } .s-failed { background: var(--failed); }
.s-limit { background: var(--limit); } .s-interrupted { background: var(--interrupted); }
.s-error { background: var(--error); } .s-running { background: var(--running); }
.s-skipped { background: var(--skipped); color: #1f2328; }
.failure { border: 1px solid var(--line); border-radius: 6px; margin: 6px 0;
  background: var(--bg); }
.failure summary { cursor: pointer; padding: 7px 10px; }
.failure .why { margin: 2px 0 0 18px; overflow-wrap: anywhere; }
.failure[open] summary { border-bottom: 1px solid var(--line); background: var(--panel); }
.failure > :not(summary) { margin: 8px 12px; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; font: 12px/1.45 ui-monospace,
  "SFMono-Regular", Menlo, Consolas, monospace; }
pre.error { color: var(--error); background: #fff5f5; padding: 8px; border-radius: 4px; }
pre.transcript { background: var(--panel); padding: 10px; border-radius: 4px;
  max-height: 480px; overflow: auto; }
.timeline { border-top: 1px solid var(--line); }
.run { display: grid; grid-template-columns: 290px 1fr; gap: 12px; padding: 7px 0;
  border-bottom: 1px solid var(--line); align-items: start; }
.run-label { font-size: 12px; }
.run-label .time { font-weight: 600; }
.argv { font: 11px ui-monospace, Menlo, Consolas, monospace; color: var(--dim);
  white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.track { position: relative; background: linear-gradient(90deg, transparent calc(25% - 1px),
  var(--line) 25%, transparent calc(25% + 1px), transparent calc(50% - 1px), var(--line) 50%,
  transparent calc(50% + 1px), transparent calc(75% - 1px), var(--line) 75%,
  transparent calc(75% + 1px)); border-left: 1px solid var(--line);
  border-right: 1px solid var(--line); }
.bar { position: absolute; height: 18px; min-width: 3px; border-radius: 3px; color: #fff;
  font-size: 11px; line-height: 18px; padding: 0 5px; white-space: nowrap; overflow: hidden;
  text-overflow: ellipsis; box-shadow: 0 0 0 1px var(--bg); }
.bar.s-skipped { color: #1f2328; }
.skipped { margin-top: 4px; font-size: 12px; color: var(--dim); }
.skipped .chip { margin-right: 4px; }
.chart-box { background: var(--bg); }
svg.chart { width: 100%; height: auto; display: block; }
svg .grid { stroke: var(--line); stroke-width: 1; }
svg .tick, svg .day { fill: var(--dim); font-size: 11px; }
svg .segment { stroke: #fff; stroke-width: .5; }
.legend { list-style: none; padding: 0; margin: 6px 0 0 64px; display: flex;
  flex-wrap: wrap; gap: 4px 18px; font-size: 13px; }
.swatch { display: inline-block; width: 11px; height: 11px; border-radius: 2px;
  margin-right: 6px; vertical-align: -1px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: right; padding: 5px 10px; border-bottom: 1px solid var(--line); }
th:first-child, td:first-child { text-align: left; }
th { color: var(--dim); font-weight: 600; }
input[name="by"] { display: none; }
.by-filter { font-size: 12px; color: var(--dim); margin: 0 0 6px; }
.by-filter label { cursor: pointer; border: 1px solid var(--line); border-radius: 10px;
  padding: 1px 8px; margin-left: 4px; color: var(--fg); }
.chip.by { background: var(--panel); color: var(--dim); border: 1px solid var(--line); }
@media (max-width: 760px) { .totals { grid-template-columns: repeat(2, 1fr); }
  .run { grid-template-columns: 1fr; } }
"""
# What starts runs (claw_batch.store.history.trigger_of): the timeline's filter shows one.
TRIGGERS = ("hand", "cron", "schedule", "watch", "hook")
CSS += (
    "".join(
        f"#by-{t}:checked ~ .timeline .run:not(.t-{t}) {{ display: none; }}\n"
        f'#by-{t}:checked ~ .by-filter label[for="by-{t}"] {{ background: var(--panel); }}\n'
        for t in TRIGGERS
    )
    + '#by-all:checked ~ .by-filter label[for="by-all"] { background: var(--panel); }\n'
)
