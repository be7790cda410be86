"""One module per command; each parses, calls the library, renders, returns an exit code."""

from claw_batch.commands.graph import graph
from claw_batch.commands.init import init
from claw_batch.commands.listing import list_tasks
from claw_batch.commands.plan import plan, why
from claw_batch.commands.run import run
from claw_batch.commands.show import show
from claw_batch.commands.validate import validate

COMMANDS = [run, plan, why, list_tasks, validate, show, init, graph]
