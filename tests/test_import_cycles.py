"""The three packages import without cycles: no module imports, even inside
a function, one that imports it back (directly or through others)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("supervision", "fdblayer", "actors")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str, known: set) -> set:
    """The project modules ``path`` imports anywhere in it (functions too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in _nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                found.add(target)  # a module importing its own package is not a cycle of ours
    return found


def _nodes(tree: ast.AST):
    """Every node, except under ``if TYPE_CHECKING:`` (imports for type hints only)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            test = getattr(child, "test", None) if isinstance(child, ast.If) else None
            if test is not None and "TYPE_CHECKING" in ast.unparse(test):
                todo.extend(child.orelse)
                continue
            todo.append(child)


def _graph() -> dict:
    paths = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    known = set(paths)
    return {name: _imports(path, name, known) for name, path in paths.items()}


def _cycles(graph: dict) -> list:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
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
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_packages_have_no_import_cycle():
    graph = _graph()
    assert len(graph) > 100, "the walk found the modules"
    assert _cycles(graph) == []


def test_the_walk_sees_imports_inside_functions_and_not_those_for_type_hints(tmp_path):
    known = set(_graph())
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fdblayer.jobs import model\n"
        "def f():\n    from fdblayer.jobs import work\n"
    )
    assert _imports(module, "fdblayer.jobs.tally", known) == {"fdblayer.jobs.work"}
    graph = _graph()
    graph["fdblayer.jobs.tally"] = graph["fdblayer.jobs.tally"] | {"fdblayer.jobs.counts"}
    assert any({"fdblayer.jobs.tally", "fdblayer.jobs.counts"} <= set(c) for c in _cycles(graph))


def _in(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_the_layers_import_only_downwards() -> None:
    """supervision knows nothing of jobs or stores, fdblayer nothing of
    actors; a node's settings (actors.settings) are under every subsystem
    (they import only actors' names and errors), and the node's root
    (actors.node) is imported by nothing but the command line."""
    graph = _graph()
    wrong = []
    for name, targets in graph.items():
        for target in targets:
            if _in(name, "supervision") and not _in(target, "supervision"):
                wrong.append((name, target))
            if _in(name, "fdblayer") and _in(target, "actors"):
                wrong.append((name, target))
            if (
                _in(name, "actors.settings")
                and _in(target, "actors")
                and not (_in(target, "actors.settings") or target in ("actors.names", "actors.errors", "actors"))
            ):
                wrong.append((name, target))
            top = _in(name, "actors.node") or name in ("actors.cli", "actors.__main__")
            if _in(target, "actors.node") and not top:
                wrong.append((name, target))
    assert wrong == []
