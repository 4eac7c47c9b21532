"""The packages form layers that point one way, and no import circle exists.

Top to bottom: the harness (``deepboot_harness``, ``train_policy.py``, ``benchmarks/``); then
``agents``, ``baselines`` and ``traces``; then ``deepboot_env`` (policy contract, env, evaluation);
then ``deepboot_env.sim``. A module may import from its own layer and those below, never above:
not with ``import``, not inside a function, and not through a ``"module:attr"`` string.

No circle of imports runs at import time, and none within a package at all: the modules of one
top-level package, linked by every import that can run (module-level, inside a function, or a
``"module:attr"`` string; not ``if TYPE_CHECKING:`` blocks), form no cycle. A package's
``__init__`` naming its own submodules (a facade registering them) is not an edge: Python imports
a package before any of its submodules anyway.

An import inside a function of ``agents/`` or ``train_policy.py`` says why it is there with a
``# lazy: <why>`` comment (torch or SB3 is slow to import, Ray is an optional extra, ...).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest
from builders import REPO

LAYERS: dict[str, int] = {
    "deepboot_env.sim": 0,
    "deepboot_env": 1,
    "agents": 2,
    "baselines": 2,
    "traces": 2,
    "deepboot_harness": 3,
    "train_policy": 3,
    "benchmarks": 3,
}
"""Package (or module) -> layer; a name belongs to its longest matching prefix."""

_NAME = re.compile(r"^(deepboot_env|agents|baselines|traces|deepboot_harness|train_policy)(\.\w+)*(:[\w.]+)?$")


def layer_of(module: str) -> int | None:
    """The layer of a dotted module name, None for modules outside the project."""
    best: tuple[int, int] | None = None
    for prefix, layer in LAYERS.items():
        if module == prefix or module.startswith(prefix + "."):
            if best is None or len(prefix) > best[0]:
                best = (len(prefix), layer)
    return None if best is None else best[1]


def module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_files() -> list[Path]:
    files = [REPO / "train_policy.py"]
    for package in ("deepboot_env", "agents", "baselines", "traces", "deepboot_harness", "benchmarks"):
        files.extend(sorted((REPO / package).rglob("*.py")))
    return files


def _docstring_nodes(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            out.add(id(node.value))  # attribute docstrings
    return out


def imports_of(path: Path, top_level_only: bool = False) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path`` (and every ``"module:attr"`` string constant,
    docstrings aside); only those run at import time with ``top_level_only``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out = []
    for node in nodes:
        if isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
            out.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
    if not top_level_only:
        docstrings = _docstring_nodes(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                if _NAME.match(node.value) and ("." in node.value or ":" in node.value):
                    out.append((node.lineno, node.value.partition(":")[0]))
    return out


def test_every_project_module_has_a_layer() -> None:
    for path in project_files():
        assert layer_of(module_name(path)) is not None, path


@pytest.mark.parametrize("path", project_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_import_from_a_higher_layer(path: Path) -> None:
    own = layer_of(module_name(path))
    bad = []
    for line, target in imports_of(path):
        layer = layer_of(target)
        if layer is not None and own is not None and layer > own:
            bad.append(f"{path.relative_to(REPO)}:{line} imports {target} (layer {layer} > {own})")
    assert not bad, "\n".join(bad)


def _resolve(target: str, known: set[str]) -> str | None:
    """The project module an imported name belongs to (``pkg.mod.attr`` -> ``pkg.mod``)."""
    while target:
        if target in known:
            return target
        target = target.rpartition(".")[0]
    return None


def test_no_import_cycles_at_module_level() -> None:
    files = {module_name(p): p for p in project_files()}
    known = set(files)
    graph = {
        name: {m for _, t in imports_of(path, top_level_only=True) if (m := _resolve(t, known)) and m != name}
        for name, path in files.items()
    }
    assert not find_cycles(graph), find_cycles(graph)


def _type_checking_lines(tree: ast.AST) -> set[int]:
    """Lines inside ``if TYPE_CHECKING:`` blocks (imports for annotations only: they never run)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            for stmt in node.body:
                out.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    return out


def package_import_graph(files: dict[str, Path]) -> dict[str, dict[str, int]]:
    """module -> {module of the same top-level package it imports: first line} over every import
    that can run (see the module docstring), a package's ``__init__`` naming its submodules aside."""
    known = set(files)
    graph: dict[str, dict[str, int]] = {}
    for name, path in files.items():
        skip = _type_checking_lines(ast.parse(path.read_text(), filename=str(path)))
        package = path.name == "__init__.py"
        edges = graph[name] = {}
        for line, target in sorted(imports_of(path)):
            module = _resolve(target, known)
            if module is None or module == name or line in skip:
                continue
            if module.split(".")[0] != name.split(".")[0] or (package and module.startswith(name + ".")):
                continue
            edges.setdefault(module, line)
    return graph


def find_cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per back edge of a depth-first search; [] if acyclic."""
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    return cycles


def test_no_import_cycles_within_a_package() -> None:
    graph = package_import_graph({module_name(p): p for p in project_files()})
    described = [
        " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:], strict=False)) + f" -> {cycle[-1]}"
        for cycle in find_cycles(graph)
    ]
    assert not described, "import cycles (module (line of its import) -> module ...):\n" + "\n".join(described)


def test_the_cycle_checker_sees_a_cycle_through_a_function(tmp_path: Path) -> None:
    sources = {
        "pkg": "import pkg.a\n",  # the facade: not an edge
        "pkg.a": "from pkg.b import f\n",
        "pkg.b": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.c import g\ndef f(): ...\n",
        "pkg.c": "def g():\n    from pkg import a\n",
    }
    (tmp_path / "pkg").mkdir()
    files = {name: tmp_path / "pkg" / f"{name.partition('.')[2] or '__init__'}.py" for name in sources}
    for name, text in sources.items():
        files[name].write_text(text)
    graph = package_import_graph(files)
    assert graph == {"pkg": {}, "pkg.a": {"pkg.b": 1}, "pkg.b": {}, "pkg.c": {"pkg": 2, "pkg.a": 2}}
    assert find_cycles(graph) == []
    files["pkg.b"].write_text("def f():\n    import pkg.c\n")  # the same import, run inside a function
    graph = package_import_graph(files)
    assert find_cycles(graph) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]


def test_the_checker_sees_lazy_and_string_imports(tmp_path: Path) -> None:
    source = (
        '"""Docstring naming agents.saved.policy_adapter is fine."""\n'
        "def f():\n    import agents.trainers.ppo\n"
        "ENTRY = 'baselines.ats:AtsPolicy'\n"
    )
    path = tmp_path / "mod.py"
    path.write_text(source)
    found = {target for _, target in imports_of(path)}
    assert found == {"agents.trainers.ppo", "baselines.ats"}
    assert layer_of("deepboot_env.sim.simulator") == 0 and layer_of("deepboot_env.env.action") == 1


LAZY_LABEL = re.compile(r"#\s*lazy: \S")
"""The comment that says why an import is inside a function."""


def unlabelled_lazy_imports(path: Path) -> list[str]:
    """``file:line`` of each import inside a function of ``path`` without a ``# lazy:`` comment on
    its lines."""
    text = path.read_text()
    lines = text.splitlines()
    bad = []
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.Import | ast.ImportFrom):
                source = "\n".join(lines[inner.lineno - 1 : inner.end_lineno or inner.lineno])
                if not LAZY_LABEL.search(source):
                    bad.append(f"{path.name}:{inner.lineno}: {lines[inner.lineno - 1].strip()}")
    return sorted(set(bad))


def test_every_lazy_import_of_agents_says_why() -> None:
    files = [REPO / "train_policy.py", *sorted((REPO / "agents").rglob("*.py"))]
    bad = [line for path in files for line in unlabelled_lazy_imports(path)]
    assert not bad, "imports inside functions without a '# lazy: <why>' comment:\n" + "\n".join(bad)


def test_the_label_checker_reads_multi_line_imports(tmp_path: Path) -> None:
    path = tmp_path / "mod.py"
    path.write_text(
        "def f():\n    import torch  # lazy: torch is slow to import\n"
        "    from a import (  # lazy: a cycle\n        b,\n    )\n    import os\n"
    )
    assert unlabelled_lazy_imports(path) == ["mod.py:6: import os"]


AGENT_ROOMS: dict[str, int] = {"agents.models": 1, "agents.saved": 2, "agents.runs": 3, "agents.trainers": 4}
"""The rooms of :mod:`agents`, bottom to top: network models, saved models, the run lifecycle,
the trainers. A room imports from itself and those below; the modules at the top of ``agents``
other than its facades (errors, hyperparameters, threads) are below every room (0)."""

AGENT_FACADES: frozenset[str] = frozenset({"agents", "agents.set_policy", "agents.described_policy", "agents.zoo"})
"""Modules at the top of ``agents`` that name rooms for their users: the package (``load_agent``,
the policy prefixes), the names old checkpoints import, the RL Zoo's ``-conf agents.zoo``."""

MAX_AGENT_TOP_MODULES = 8
"""Modules at the top of ``agents/`` (``__init__`` included): the rest lives in rooms."""


def room_of(module: str) -> int | None:
    """The room rank of an ``agents`` module (None for a facade or a module outside ``agents``)."""
    if module in AGENT_FACADES or not module.startswith("agents."):
        return None
    return next((rank for room, rank in AGENT_ROOMS.items() if module.startswith(room + ".") or module == room), 0)


def test_agents_rooms_point_one_way() -> None:
    files = {module_name(p): p for p in sorted((REPO / "agents").rglob("*.py"))}
    known = set(files)
    bad = []
    for name, path in files.items():
        own = room_of(name)
        for line, target in imports_of(path):
            module = _resolve(target, known)
            rank = room_of(module) if module else None
            if own is not None and rank is not None and rank > own and not path.name == "__init__.py":
                bad.append(f"{path.relative_to(REPO)}:{line} imports {module} (room {rank} > {own})")
    assert not bad, "\n".join(bad)
    assert room_of("agents.errors") == 0 and room_of("agents.trainers.ppo") == 4 and room_of("agents.zoo") is None


def test_agents_top_holds_few_modules() -> None:
    top = sorted(path.name for path in (REPO / "agents").glob("*.py"))
    assert len(top) <= MAX_AGENT_TOP_MODULES, top
    rooms = {path.parent.name for path in (REPO / "agents").glob("*/__init__.py")}
    assert {room.rpartition(".")[2] for room in AGENT_ROOMS} <= rooms


def test_old_checkpoint_names_stay_importable() -> None:
    """Checkpoints saved before the rooms name ``agents.set_policy`` and ``agents.described_policy``."""
    import agents.described_policy
    import agents.models.described_policy
    import agents.models.set_policy
    import agents.set_policy

    assert agents.set_policy.SetActorCriticPolicy is agents.models.set_policy.SetActorCriticPolicy
    assert agents.described_policy.DescribedMultiInputPolicy is agents.models.described_policy.DescribedMultiInputPolicy
