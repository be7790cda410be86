"""The house's floors (ARCHITECTURE.md): each subpackage of claw_batch is a layer, and imports
go one way, down. Read from the source — every import, late ones inside functions included;
only those under `if TYPE_CHECKING:` are left out — so that a late import cannot hide a
cycle or a climb back up."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "claw_batch"

# Bottom first. "" is the package's root leaves (errors, config, clock, ...); a module may
# import its own layer and those below it. cli and __main__ sit on top of everything.
LAYERS = (
    "",
    "safety",
    "llm",
    "store",
    "notify",
    "terminal",
    "memory",
    "skills",
    "taint",
    "sandbox",
    "mcp",
    "tools",
    "agent",
    "plan",
    "clawfile",
    "cluster",
    "run",
    "triggers",
    "report",
    "commands",
)
TOP = frozenset({"claw_batch.cli", "claw_batch.__main__"})
CLI_LIBRARIES = ("click",)  # only the commands and cli.py speak to the terminal's arguments
ADAPTER = "claw_batch.llm.openai_compat"  # the one module that imports openai (~0.5 s)


def modules(package: Path) -> dict[str, Path]:
    """Dotted module name -> its file, for every module of the package."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """What the module imports at run time: modules of the package, and top-level names of
    others (`click`)."""
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(name, path, node)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    return {_owner(f, known) for f in found}


def _absolute(name: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _owner(imported: str, known: set[str]) -> str:
    """The module an import names (`claw_batch.x.y.Name` -> `claw_batch.x.y`), or the
    top-level name of another distribution."""
    while imported and imported not in known:
        if "." not in imported:
            return imported
        imported = imported.rpartition(".")[0]
    return imported


def layer(module: str) -> int:
    """The module's floor: its subpackage's place in LAYERS (the top for cli)."""
    if module in TOP:
        return len(LAYERS)
    parts = module.split(".")
    sub = parts[1] if len(parts) > 2 or (len(parts) == 2 and _is_package(parts[1])) else ""
    return LAYERS.index(sub) if sub in LAYERS else -1


def _is_package(name: str) -> bool:
    return (PACKAGE / name / "__init__.py").exists()


def graph(package: Path) -> dict[str, set[str]]:
    """Each module -> the package's modules it imports."""
    found = modules(package)
    known = set(found)
    return {m: imports(m, p, known) for m, p in found.items()}


def upward(edges: dict[str, set[str]], floor: object = layer) -> Iterator[str]:
    """Every import of a module on a higher floor than the importer."""
    at = floor if callable(floor) else layer
    for module, targets in sorted(edges.items()):
        for target in sorted(targets):
            if target in edges and at(target) > at(module):
                yield f"{module} imports {target}"


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in edges:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


EDGES = graph(PACKAGE)


def test_every_module_is_on_a_floor() -> None:
    assert [m for m in EDGES if layer(m) < 0] == []


def test_imports_only_go_down() -> None:
    assert list(upward(EDGES)) == []


def test_no_module_imports_another_that_imports_it_back() -> None:
    assert cycles(EDGES) == []


def test_no_cycle_between_subpackages() -> None:
    floors = {m: m.split(".")[1] if layer(m) > 0 else "" for m in EDGES}
    between = {
        f: {floors[t] for m in EDGES if floors[m] == f for t in EDGES[m] if t in EDGES}
        for f in set(floors.values())
    }
    assert cycles(between) == []


def test_only_the_commands_speak_click() -> None:
    speaking = [
        m
        for m, targets in EDGES.items()
        if targets & set(CLI_LIBRARIES) and not (m in TOP or m.startswith("claw_batch.commands"))
    ]
    assert speaking == []


def test_only_the_adapter_imports_openai() -> None:
    """STYLE.md: `claw list`, `claw plan` and an up-to-date run never pay for it; a module
    that wants it loaded early imports the adapter."""
    assert [m for m, targets in EDGES.items() if "openai" in targets and m != ADAPTER] == []


# --- the checks can fail -------------------------------------------------------------------


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "claw_batch"


@pytest.mark.parametrize("late", [False, True])
def test_an_upward_import_is_found_late_or_not(tmp_path: Path, late: bool) -> None:
    """A module of `safety` that imports `run` (at the top, or inside a function)."""
    body = (
        "def f():\n    from claw_batch.run import runner\n"
        if late
        else ("from claw_batch.run import runner\n")
    )
    package = write(
        tmp_path,
        {
            "claw_batch/__init__.py": "",
            "claw_batch/safety/__init__.py": "",
            "claw_batch/safety/paths.py": body,
            "claw_batch/run/__init__.py": "",
            "claw_batch/run/runner.py": "from claw_batch.safety import paths\n",
        },
    )
    edges = graph(package)
    floor = {"claw_batch.safety.paths": 1, "claw_batch.run.runner": 13}
    found = list(upward(edges, lambda m: floor.get(m, 0)))
    assert found == ["claw_batch.safety.paths imports claw_batch.run.runner"]
    assert cycles(edges) == [["claw_batch.run.runner", "claw_batch.safety.paths"]]


def test_an_import_for_type_checking_only_is_not_counted(tmp_path: Path) -> None:
    package = write(
        tmp_path,
        {
            "claw_batch/__init__.py": "",
            "claw_batch/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from claw_batch import b\n",
            "claw_batch/b.py": "from claw_batch import a\n",
        },
    )
    assert cycles(graph(package)) == []
