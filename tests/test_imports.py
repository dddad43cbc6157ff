"""The layout of kb/ (issue #19): no import cycle between its modules, and the
text stages import no ORM, so they run (and test) without a database."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from django.conf import settings
from django.test import SimpleTestCase

ROOT = Path(settings.BASE_DIR)


def on_source(check, source: str):
    """`check` (a function of a file's path) run on a test file holding
    `source`: how each checker below is shown to find what it looks for."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "test_x.py"
        path.write_text(source)
        return check(path)


# Text in, dataclasses out: importing these must load neither Django's ORM nor
# kb.models. (The integrator adds kb/retrieval/'s pure stages here.)
ORM_FREE = [
    "kb.parsing",
    "kb.decoding",
    "kb.markup_text",
    "kb.chunking",
    "kb.embedding",
    "kb.readers",
    "kb.readers.docx",
    "kb.readers.html",
    "kb.readers.pdf",
    "kb.readers.pdf_assembly",
    "kb.readers.pdf_lines",
    "kb.readers.pdf_order",
    "kb.readers.pdf_running_lines",
    "kb.readers.pdf_tables",
    "kb.readers.writer",
    "kb.readers.reading",
    "kb.spans",
    "kb.exact_tokens",
    "kb.sentences",
    "kb.retrieval.tables",
    "kb.retrieval.expansion",
    "kb.retrieval.passages",
    "kb.retrieval.rows",
    "kb.answerer",
    "kb.llm",
]


def modules_of(root: Path, package: str) -> dict[str, Path]:
    """Every module of `package` (a folder under `root`) by dotted name."""
    found = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def import_graph(root: Path, package: str) -> dict[str, dict[str, int]]:
    """module -> {module it imports: line}, for the imports between modules of
    `package`, wherever they are written (in functions too: a cycle hidden in a
    function is still a cycle)."""
    modules = modules_of(root, package)
    graph: dict[str, dict[str, int]] = {name: {} for name in modules}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
            for target in _targets(node, here, modules):
                if target != name:
                    graph[name].setdefault(target, node.lineno)
    return graph


def _targets(node: ast.AST, here: str, modules) -> list[str]:
    if isinstance(node, ast.Import):
        return [m for a in node.names if (m := _module(a.name, modules))]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:  # relative: from the importing module's package upwards
        package = here.split(".")[: len(here.split(".")) - node.level + 1]
        base = ".".join([*package, *([base] if base else [])])
    found = []
    for alias in node.names:
        # `from kb.readers import docx` imports the module kb.readers.docx;
        # `from kb.readers import Reading` imports a name of kb.readers.
        full = f"{base}.{alias.name}"
        found.append(full if full in modules else _module(base, modules))
    return [m for m in found if m]


def _module(dotted: str, modules) -> str | None:
    """The longest prefix of `dotted` that is one of the modules, if any."""
    while dotted and dotted not in modules:
        dotted = dotted.rpartition(".")[0]
    return dotted or None


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def describe(graph: dict[str, dict[str, int]], component: list[str]) -> str:
    """A cycle named by its modules and the import lines that close it."""
    lines = [
        f"  {a} imports {b} (line {graph[a][b]})"
        for a in component
        for b in sorted(graph[a])
        if b in component
    ]
    return "import cycle: " + " <-> ".join(component) + "\n" + "\n".join(lines)


class ImportCycleTestCase(SimpleTestCase):
    def test_it_finds_no_import_cycle_in_kb(self):
        graph = import_graph(ROOT, "kb")
        found = [describe(graph, c) for c in cycles(graph)]
        self.assertEqual(found, [], "\n\n" + "\n\n".join(found))

    def test_it_names_a_cycle_hidden_in_a_function(self):
        with tempfile.TemporaryDirectory() as folder:
            package = Path(folder) / "pkg"
            (package / "sub").mkdir(parents=True)
            files = {
                "__init__.py": "",
                "a.py": "from pkg import b\n",
                "b.py": "def f():\n    from pkg.sub import c\n",
                "sub/__init__.py": "from . import c\n",
                "sub/c.py": "from ..a import x\n",
                "d.py": "import pkg.a\nfrom pkg import sub\n",  # imports, no cycle
            }
            for name, text in files.items():
                (package / name).write_text(text)
            graph = import_graph(Path(folder), "pkg")
            found = cycles(graph)
        self.assertEqual(found, [["pkg.a", "pkg.b", "pkg.sub.c"]])
        self.assertIn("pkg.b imports pkg.sub.c (line 2)", describe(graph, found[0]))


class OrmFreeModulesTestCase(SimpleTestCase):
    def test_the_text_stages_import_no_orm(self):
        # A fresh interpreter with the settings configured but no app loaded:
        # importing kb.models there fails, and Django's ORM would show in
        # sys.modules if any of these modules (or what they import) loaded it.
        check = (
            "import importlib, sys; importlib.import_module(sys.argv[1]); "
            "print(sorted(m for m in ('django.db.models', 'kb.models') "
            "if m in sys.modules))"
        )
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "KB_TESTING": "1",
        }
        for module in ORM_FREE:
            with self.subTest(module):
                done = subprocess.run(
                    [sys.executable, "-c", check, module],
                    cwd=ROOT,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                self.assertEqual(done.returncode, 0, done.stderr[-2000:])
                self.assertEqual(done.stdout.strip(), "[]", f"{module} loads the ORM")


# Packages whose private names (one leading underscore) stay in their module.
OWN = ("kb", "config", "tests")


def private_uses(path: Path) -> list[str]:
    """`from kb.x import _name` and `x._name` on a module imported from kb,
    config or tests, in one file; Django's `_meta` is public API."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    modules, found = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(OWN):
            for alias in node.names:
                if _private(alias.name):
                    found.append(
                        f"line {node.lineno}: from {node.module} import {alias.name}"
                    )
                else:
                    modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(OWN):
                    modules.add((alias.asname or alias.name).split(".")[0])
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
        ):
            found.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name != "_meta"


class PrivateNamesTestCase(SimpleTestCase):
    """Issue #31: what another module uses is public; a private name is its
    module's own."""

    def test_no_module_uses_another_s_private_names(self):
        found = []
        for folder in OWN:
            for path in sorted((ROOT / folder).rglob("*.py")):
                if "migrations" not in path.parts:
                    found += [
                        f"{path.relative_to(ROOT)} {use}" for use in private_uses(path)
                    ]
        self.assertEqual(found, [], "\n".join(found))

    def test_it_sees_both_forms(self):
        found = on_source(
            private_uses,
            "from kb.embedding import _pad, read\n"
            "from kb import ingestion\n"
            "ingestion._stats(1)\n"
            "Source._meta\n",
        )
        self.assertEqual(
            found, ["line 1: from kb.embedding import _pad", "line 3: ingestion._stats"]
        )


WORKERS = {"run_burst_worker", "start_worker"}


def unmarked_worker_tests(path: Path) -> list[str]:
    """Tests of a module that start a worker process (tests.base) without the
    `slow` mark that pytest.ini defines for them."""

    def starts_worker(node: ast.AST) -> bool:
        for call in ast.walk(node):
            if isinstance(call, ast.Call):
                func = call.func
                name = getattr(func, "id", None) or getattr(func, "attr", None)
                if name in WORKERS:
                    return True
        return False

    def slow(node) -> bool:
        marks = [ast.unparse(d) for d in node.decorator_list]
        if isinstance(node, ast.ClassDef):
            marks += [
                ast.unparse(s)
                for s in node.body
                if isinstance(s, ast.Assign) and "pytestmark" in ast.unparse(s)
            ]
        return any("mark.slow" in mark for mark in marks)

    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in tree.body:
        tests = [node] if isinstance(node, ast.FunctionDef) else []
        if isinstance(node, ast.ClassDef) and not slow(node):
            tests = [n for n in node.body if isinstance(n, ast.FunctionDef)]
        found += [
            test.name
            for test in tests
            if test.name.startswith("test") and starts_worker(test) and not slow(test)
        ]
    return found


class SlowMarkTestCase(SimpleTestCase):
    """Issue #31: a test that runs a worker process is marked slow, so that
    `-m "not slow"` gives a quick run (CI runs them all)."""

    def test_tests_that_run_workers_are_marked_slow(self):
        found = [
            f"{path.name}: {name}"
            for path in sorted((ROOT / "tests").glob("test_*.py"))
            for name in unmarked_worker_tests(path)
        ]
        self.assertEqual(found, [], "\n".join(found))

    def test_it_finds_an_unmarked_one(self):
        found = on_source(
            unmarked_worker_tests,
            "import pytest\n"
            "from tests.base import run_burst_worker\n"
            "class A:\n"
            "    def test_a(self):\n"
            "        run_burst_worker()\n"
            "    @pytest.mark.slow\n"
            "    def test_b(self):\n"
            "        run_burst_worker()\n"
            "@pytest.mark.slow\n"
            "class B:\n"
            "    def test_c(self):\n"
            "        run_burst_worker()\n"
            "def test_d():\n"
            "    run_burst_worker()\n",
        )
        self.assertEqual(found, ["test_a", "test_d"])


def imported_test_modules(path: Path) -> list[str]:
    """The other test modules (tests/test_*.py) a file imports: what tests
    share belongs in a helper module (tests/base.py, tests/syncing.py, …), so
    that running one test file never collects another's tests."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            names = names[:1] if _is_test_module(node.module) else names[1:]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found += [n for n in names if _is_test_module(n)]
    return sorted(set(found))


def _is_test_module(dotted: str) -> bool:
    parts = dotted.split(".")
    return len(parts) == 2 and parts[0] == "tests" and parts[1].startswith("test_")


class TestModulesApartTestCase(SimpleTestCase):
    """Issue #31: test modules import no other test module."""

    def test_no_test_module_imports_another(self):
        found = [
            f"{path.name}: {', '.join(names)}"
            for path in sorted((ROOT / "tests").glob("*.py"))
            if (names := imported_test_modules(path))
        ]
        self.assertEqual(found, [], "\n".join(found))

    def test_it_sees_both_forms(self):
        found = on_source(
            imported_test_modules,
            "from tests.test_parsing import NESTED\n"
            "import tests.test_golden\n"
            "from tests import test_sync\n"
            "from tests.base import make_users\n",
        )
        self.assertEqual(
            found, ["tests.test_golden", "tests.test_parsing", "tests.test_sync"]
        )
