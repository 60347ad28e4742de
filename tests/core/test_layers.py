"""The import rules of docs/architecture.md, checked on the source: no module imports from
a layer above its own, no two packages of one layer import each other, no import cycle
(imports made only for type checking count: a reader follows them too), typer only in the
command line and rich only there and in the packages' renderers (`render.py`), which no
other package reads.

The graph is read with `ast` from src/genbench, so the check needs nothing installed and
sees every import, those inside functions too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.core

SRC = Path(__file__).resolve().parents[2] / "src" / "genbench"

# bottom up; a unit is a top-level module or a package of src/genbench (docs/architecture.md)
LAYERS: list[tuple[str, ...]] = [
    ("genbench", "errors", "fmt", "atomic", "redact"),
    ("records", "rows", "settings", "tensors"),
    ("stats",),
    ("transport",),
    ("sim", "local"),
    ("check", "load", "selfcheck"),
    ("engines",),  # started and watched engines: healthy is check's preflight
    ("generate",),
    ("run",),  # a run's --input is read as generate reads its input
    ("plan",),
    ("inspect", "compare"),
    ("report", "export"),
    ("cli",),
    ("commands",),
    ("__main__",),
]
LAYER_OF = {unit: i for i, units in enumerate(LAYERS) for unit in units}
# a command imports the shared parts of commands/, never another command
# (watch: the job's metrics and Batch options, generate's own, no command of its own)
COMMANDS_SHARED = {
    "genbench.commands.common", "genbench.commands.console", "genbench.commands.watch",
}  # fmt: skip
TYPER_AT = ("cli", "commands")  # where typer may be imported
RICH_AT = ("cli", "commands")  # ... and rich, besides the packages' render.py


def _modules() -> dict[str, Path]:
    mods = {}
    for p in SRC.rglob("*.py"):
        parts = list(p.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = p
    return mods


MODULES = _modules()


def _imports(name: str, path: Path) -> tuple[set[str], set[str]]:
    """The genbench modules `name` imports, and the outside packages it imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    ours: set[str] = set()
    outside: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            targets = [(base, a.name) for a in node.names]
        else:
            continue
        for module, member in targets:
            if module != "genbench" and not module.startswith("genbench."):
                outside.add(module.split(".")[0])
            elif member is not None and f"{module}.{member}" in MODULES:
                ours.add(f"{module}.{member}")
            elif module in MODULES:
                ours.add(module)
    ours.discard(name)
    return ours, outside


GRAPH: dict[str, set[str]] = {}
OUTSIDE: dict[str, set[str]] = {}
for _name, _path in MODULES.items():
    GRAPH[_name], OUTSIDE[_name] = _imports(_name, _path)


def unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_every_unit_has_a_layer():
    assert {unit(m) for m in MODULES} - set(LAYER_OF) == set()


def test_no_import_against_the_layers():
    wrong = []
    for module, targets in GRAPH.items():
        mine = unit(module)
        for target in targets:
            theirs = unit(target)
            if theirs == mine:
                continue
            if LAYER_OF[theirs] >= LAYER_OF[mine]:
                wrong.append(f"{module} imports {target} ({theirs} is not below {mine})")
    assert wrong == []


def test_a_command_imports_no_other_command():
    wrong = [
        f"{m} imports {t}"
        for m, targets in GRAPH.items()
        if unit(m) == "commands"
        for t in targets
        if unit(t) == "commands" and t not in COMMANDS_SHARED
    ]
    assert wrong == []


def test_typer_and_rich_stay_in_the_command_line():
    wrong = []
    for module, outside in OUTSIDE.items():
        u = unit(module)
        if "typer" in outside and u not in TYPER_AT:
            wrong.append(f"{module} imports typer")
        renderer = module.endswith(".render")
        if "rich" in outside and u not in RICH_AT and not renderer:
            wrong.append(f"{module} imports rich")
    assert wrong == []


def test_a_renderer_is_read_by_its_package_and_the_commands():
    """What the console shows is drawn in a package's render.py; another package that
    needs the same shaping takes it from a module of text, not from the console's."""
    wrong = [
        f"{m} imports {t}"
        for m, targets in GRAPH.items()
        for t in targets
        if t.endswith(".render") and unit(m) not in (unit(t), "commands")
    ]
    assert wrong == []


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle():
    assert cycles(GRAPH) == []


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


# -- inside generate/: the input below the store, the store below the job --
# input/ reads and checks rows and needs nothing else of generate; store/ owns the output
# directory and reads besides only the input, a row's request fingerprint (what it indexes)
# and the job's settings (what a resume compares); the job, the pipeline, the progress and
# the console stand above both.
GENERATE_FLOORS = {
    "genbench.generate.input": set(),
    "genbench.generate.store": {"genbench.generate.input", "genbench.generate.request_hash",
                                "genbench.generate.recipe", "genbench.generate.jobconfig"},
}  # fmt: skip


def _generate_part(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:3]) if parts[:2] == ["genbench", "generate"] else module


def test_generate_input_and_store_import_nothing_above_them():
    wrong = [
        f"{m} imports {t}"
        for m, targets in GRAPH.items()
        if (part := _generate_part(m)) in GENERATE_FLOORS
        for t in targets
        if unit(t) == "generate" and t != "genbench.generate"
        and (theirs := _generate_part(t)) != part and theirs not in GENERATE_FLOORS[part]
    ]
    assert wrong == []


# -- the output directory has one owner: its file names are spelled in generate/store/layout.py --

LAYOUT = "genbench.generate.store.layout"
# a whole string that names a file of a generate output directory (a name, a glob, a
# shard's name), not prose that mentions one
OUTPUT_NAME = re.compile(
    r"^(\.genbench|\.idx|job(-\w+)?\.json|lock\*?|data-"
    r"|(errors|quarantine|replaced|stale|runs|batch_output|batch_errors|requests)(\*|-\w+)?\.jsonl)$"
)
# a run directory's own request log shares the generate log's name; run/ owns that one
NAMED_ELSEWHERE = {("requests.jsonl", "genbench.run.result")}  # (name, module)


def _names(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    docs = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and n.body
        and isinstance(n.body[0], ast.Expr)
    }
    return [
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    ]


def test_only_the_layout_spells_a_file_name_of_the_output_directory():
    found = [
        f"{name}:{line}: {value!r}"
        for name, path in sorted(MODULES.items())
        if name != LAYOUT and unit(name) != "sim"
        for line, value in _names(path)
        if OUTPUT_NAME.match(value) and (value, name) not in NAMED_ELSEWHERE
    ]
    assert not found, "ask genbench.generate.store.layout for the path:\n" + "\n".join(found)


def test_the_layout_rule_sees_a_spelled_name():
    assert all(OUTPUT_NAME.match(s) for s in (".genbench", "replaced.jsonl", "job.json",
               "errors*.jsonl", "requests-1of4.jsonl", "lock"))  # fmt: skip
    assert not OUTPUT_NAME.match("the replaced.jsonl file") and not OUTPUT_NAME.match("a.json")


def test_no_module_imports_its_own_package_face_that_imports_it():
    """`from genbench.report import cards` inside report/html.py runs through the
    package's __init__, which imports html: a cycle through the face. Import the module."""
    found = []
    for name, path in MODULES.items():
        package = name.rpartition(".")[0]
        if path.name == "__init__.py" or package == "genbench" or name not in GRAPH[package]:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == package and not node.level:
                found.append(f"{name}:{node.lineno}: from {package} import ...")
    assert not found, "\n".join(found)


MAX_MODULE_LINES = 500  # a module past it holds two ideas: split it where they part


def test_no_module_over_its_size():
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines())
             for name, path in MODULES.items()}  # fmt: skip
    big = {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES}
    assert not big, f"over {MAX_MODULE_LINES} lines: {big}"
