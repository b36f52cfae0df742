"""The import graph of the package (docs: DESIGN.md "Layers"), read from the source with `ast`:
every `import` and `from ... import` (module level and inside functions; relative ones resolved)
and `importlib.import_module("<literal>")`.

- Layers only import down: app.py -> ui -> runner -> tools -> training -> models -> data -> config
  (the package's top-level modules: cli and __main__ sit beside app.py, fsutil and secrets below
  config); models never imports training.
- The page (ui) never imports torch, diffusers, transformers, the trainer or the model families.
- A module of models/ imports no private (`_name`) name of another: what families share is public
  in the shared core (models/common.py, family_parts.py, key_layout.py).
- No import cycle between the package's modules.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "ot_gradio"
# highest first; an import may only point to its own layer or one after it
LAYERS = ("entry", "ui", "runner", "tools", "training", "models", "data", "config", "base")
TOP_LEVEL = {"app": "entry", "ot_gradio.cli": "entry", "ot_gradio.__main__": "entry", "ot_gradio": "base",
             "ot_gradio.fsutil": "base", "ot_gradio.secrets": "base", "ot_gradio.jsontext": "base"}
UI_FORBIDDEN = ("torch", "diffusers", "transformers", "ot_gradio.training", "ot_gradio.models")



def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    found = {_module_name(p): p for p in sorted((ROOT / PACKAGE).rglob("*.py"))}
    found["app"] = ROOT / "app.py"
    return found


def _resolve(importer: str, is_package: bool, level: int, module: str | None) -> str:
    if not level:
        return module or ""
    base = importer.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


@cache
def imports(name: str) -> tuple[tuple[str, int, bool], ...]:
    """(imported module, line, at module level) for each import of module `name`; `from a import b`
    counts as an import of `a.b` when that is a module of the package, else of `a`."""
    path = modules()[name]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    is_package = path.name == "__init__.py"
    top_level = {id(n) for n in tree.body}
    for node in tree.body:  # `if` / `try` blocks at module level run at import too, `if TYPE_CHECKING:` does not
        if isinstance(node, (ast.If, ast.Try)) and "TYPE_CHECKING" not in ast.unparse(getattr(node, "test", ast.Pass())):
            top_level.update(id(n) for n in ast.walk(node))
    out: list[tuple[str, int, bool]] = []
    for node in ast.walk(tree):
        at_top = id(node) in top_level
        if isinstance(node, ast.Import):
            out.extend((alias.name, node.lineno, at_top) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(name, is_package, node.level, node.module)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.append((sub if sub in modules() else target, node.lineno, at_top))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and not node.args[0].value.startswith(".")):
            out.append((node.args[0].value, node.lineno, False))
    return tuple(out)


def layer(name: str) -> str | None:
    """The layer of a module of ours (None: not ours)."""
    if name in TOP_LEVEL:
        return TOP_LEVEL[name]
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return None
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "base"


def _ours(imported: str) -> str | None:
    """The module of ours an import names (its longest known prefix), or None."""
    parts = imported.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in modules():
            return ".".join(parts[:i])
    return None


def upward_imports() -> list[tuple[str, str, int]]:
    bad = []
    for name in modules():
        mine = LAYERS.index(layer(name))
        for imported, line, _ in imports(name):
            target = _ours(imported)
            if target is not None and LAYERS.index(layer(target)) < mine:
                bad.append((name, target, line))
    return bad


def test_layers_only_import_down():
    found = upward_imports()
    unexpected = [f"{modules()[a].relative_to(ROOT)}:{line} imports {b} ({layer(a)} -> {layer(b)})"
                  for a, b, line in found]
    assert not unexpected, "imports pointing up a layer:\n" + "\n".join(unexpected)


def test_models_do_not_import_training():
    bad = [f"{modules()[name].relative_to(ROOT)}:{line} imports {imported}"
           for name in modules() if layer(name) == "models"
           for imported, line, _ in imports(name) if imported == "ot_gradio.training" or imported.startswith("ot_gradio.training.")]
    assert not bad, "models import training:\n" + "\n".join(bad)


def ui_violations() -> list[tuple[str, str, int]]:
    return [(name, imported, line) for name in modules() if layer(name) == "ui"
            for imported, line, _ in imports(name)
            if any(imported == f or imported.startswith(f + ".") for f in UI_FORBIDDEN)]


def test_ui_imports_no_torch_and_no_trainer():
    found = ui_violations()
    bad = [f"{modules()[a].relative_to(ROOT)}:{line} imports {b}" for a, b, line in found]
    assert not bad, "the page imports what it must not:\n" + "\n".join(bad)


def heavy_chain(start: str) -> list[str] | None:
    """The module-level import chain (packages loaded on the way included) by which importing
    `start` loads torch, diffusers or transformers, or None."""
    heavy = ("torch", "diffusers", "transformers")
    seen, todo = {start}, [(start, [start])]
    while todo:
        name, chain = todo.pop()
        for imported, _, at_top in imports(name):
            if not at_top:
                continue
            if imported.split(".")[0] in heavy:
                return [*chain, imported]
            target = _ours(imported)
            parents = [".".join(target.split(".")[:i]) for i in range(1, target.count(".") + 2)] if target else []
            for nxt in parents:
                if nxt in modules() and nxt not in seen:
                    seen.add(nxt)
                    todo.append((nxt, [*chain, nxt]))
    return None


def test_the_page_loads_no_torch_when_imported():
    """Following module-level imports from every ui module reaches no torch, diffusers or transformers."""
    bad = [" -> ".join(chain) for name in modules() if layer(name) == "ui" and (chain := heavy_chain(name))]
    assert not bad, "importing the page loads:\n" + "\n".join(bad)


def private_imports() -> list[tuple[str, str, int]]:
    """(importer, module._name, line) for each `from ot_gradio.models.x import _name` in another models module."""
    out = []
    for name in (n for n in modules() if layer(n) == "models"):
        path = modules()[name]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                source = _resolve(name, path.name == "__init__.py", node.level, node.module)
                out.extend((name, f"{source}.{a.name}", node.lineno) for a in node.names
                           if a.name.startswith("_") and not a.name.startswith("__") and source != name and layer(source) == "models")
    return out


def test_families_import_no_private_names():
    found = private_imports()
    bad = [f"{modules()[a].relative_to(ROOT)}:{line} imports {b}" for a, b, line in found]
    assert not bad, "private names imported from another module (make them public in the shared core):\n" + "\n".join(bad)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name in modules():
        for imported, _, _ in imports(name):
            target = _ours(imported)
            if target is not None and target != name and not name.startswith(target + "."):  # a package's own __init__
                graph.setdefault(name, set()).add(target)
    return graph


def cycle_groups(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected groups of more than one module (each holds at least one cycle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_no_import_cycle():
    graph = import_graph()
    groups = cycle_groups(graph)
    new = list(groups)
    shown = [" -> ".join(find_cycle({a: graph[a] & g for a in g})) for g in new]
    assert not new, "import cycles:\n" + "\n".join(shown)


@pytest.mark.parametrize(("source", "rule"), [
    ("from ot_gradio.training.lora import x\n", "up"),
    ("def f():\n    from ..training import lora\n", "up"),
    ("import torch\n", "ui"),
    ("def f():\n    from ot_gradio.training import schedulers\n", "ui"),
    ("from ot_gradio.models.sd15 import _HUB_ID\n", "private"),
    ("from ot_gradio.data import planted_heavy\n", "heavy"),
])
def test_the_rules_see_what_they_check(source, rule, tmp_path, monkeypatch):
    """Planted violations are found: an upward import (also function-level and relative), torch or
    the trainer in the page, a private name of another family, torch loaded through a module the
    page imports; and a planted cycle is reported with its modules."""
    planted = "ot_gradio.models.planted" if rule in ("up", "private") else "ot_gradio.ui.planted"
    path = tmp_path / "planted.py"
    path.write_text(source)
    monkeypatch.setitem(modules(), planted, path)
    heavy = tmp_path / "planted_heavy.py"
    heavy.write_text("import ot_gradio.config.enums\nif True:\n    import torch\n")
    monkeypatch.setitem(modules(), "ot_gradio.data.planted_heavy", heavy)
    imports.cache_clear()
    try:
        if rule == "up":
            assert any(a == planted and layer(b) == "training" for a, b, _ in upward_imports())
        elif rule == "ui":
            assert any(a == planted for a, _, _ in ui_violations())
        elif rule == "private":
            assert (planted, "ot_gradio.models.sd15._HUB_ID", 1) in private_imports()
        else:
            assert heavy_chain(planted) == [planted, "ot_gradio.data.planted_heavy", "torch"]
    finally:
        imports.cache_clear()
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"] and cycle_groups(graph) == [{"a", "b", "c"}]
