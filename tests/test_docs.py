"""The documentation against the code (issue #31 item 1): the README's "Where
things are" names every module and package of kb/ and nothing that is gone;
docs/configuration.md names every environment variable config/ reads, and
nothing it no longer reads; every relative link of README.md and docs/*.md
leads to a file that exists, and to a heading of it when it names one.

The checks are plain functions of text and a folder, so each is also tested on
a small made-up case that must fail."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from django.test import SimpleTestCase

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Read by config/settings.py, but set only by the test suite for itself and the
# processes it starts (tests/base.py, conftest.py, kb_load's test server), or by
# pytest: no operator sets them, so docs/configuration.md only mentions them in
# prose, outside its tables.
TEST_ONLY = {
    "KB_TESTING",
    "KB_DB_NAME",
    "KB_TEST_DB_NAME",
    "KB_TEST_MEDIA_ROOT",
    "PYTEST_VERSION",
    "PYTEST_XDIST_WORKER",
}
# Schema history: numbered files no map should list one by one.
UNLISTED_MODULES = {"kb/migrations/"}

CODE = re.compile(r"`([^`]+)`")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
ENV_READ = re.compile(
    r"""(?:os\.environ\.get\(\s*|os\.environ\[\s*|env\w*\(\s*)["']([A-Z][A-Z0-9_]*)["']"""
    r"""|["']([A-Z][A-Z0-9_]*)["']\s+in\s+os\.environ"""
)


# --- the module map ----------------------------------------------------------------


def section(markdown: str, heading: str) -> str:
    """The text under `## heading`, up to the next heading of that level."""
    match = re.search(
        rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", markdown, re.M | re.S
    )
    return match.group(1) if match else ""


def map_rows(markdown: str) -> list[tuple[list[str], str]]:
    """The map's rows: the paths of the first column, and the description."""
    rows = []
    for line in section(markdown, "Where things are").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 2:
            paths = [p for p in CODE.findall(cells[0]) if "/" in p or p.endswith(".py")]
            if paths:
                rows.append((paths, " | ".join(cells[1:])))
    return rows


def packages(root: Path) -> list[str]:
    """Every package under kb/, as "kb/name/"."""
    found = [p.parent for p in (root / "kb").rglob("__init__.py")]
    return sorted(
        f"{p.relative_to(root).as_posix()}/" for p in found if p != root / "kb"
    )


def modules_of(root: Path, package: str) -> list[str]:
    """The modules directly in a folder, by name without ".py"."""
    return sorted(p.stem for p in (root / package).glob("*.py") if p.stem != "__init__")


def map_problems(markdown: str, root: Path) -> list[str]:
    """What the map says that the code does not, and what it leaves out."""
    rows = map_rows(markdown)
    listed = {path for paths, _ in rows for path in paths}
    problems = [
        f"{path} is listed but does not exist"
        for path in sorted(listed)
        if not (root / path).exists()
    ]
    for name in modules_of(root, "kb"):
        if f"kb/{name}.py" not in listed:
            problems.append(f"kb/{name}.py is missing from the map")
    for package in packages(root):
        if not any(path.startswith(package) for path in listed):
            problems.append(f"{package} is missing from the map")
    for paths, text in rows:
        for package in [p for p in paths if p.endswith("/") and p.startswith("kb/")]:
            problems += _package_row_problems(root, package, text)
    return problems


def _package_row_problems(root: Path, package: str, text: str) -> list[str]:
    """A package's row names each of its modules, and only modules it has."""
    if package in UNLISTED_MODULES or not (root / package).is_dir():
        return []
    have = modules_of(root, package)
    tokens = CODE.findall(text)
    named = {
        token.removesuffix(".py")
        for token in tokens
        if re.fullmatch(r"[a-z_][a-z0-9_]*(\.py)?", token)
    }
    problems = [
        f"{package}{token} is named but does not exist"
        for token in tokens
        if re.fullmatch(r"[\w.-]+/", token) and not (root / package / token).is_dir()
    ]
    problems += [
        f"{package}{name}.py is named but does not exist"
        for name in sorted(named - set(have))
    ]
    problems += [
        f"{package}{name}.py is missing from its package's row"
        for name in have
        if name not in named
    ]
    return problems


class ModuleMapTestCase(SimpleTestCase):
    def test_the_readme_maps_every_module_and_package_of_kb(self):
        readme = (ROOT / "README.md").read_text("utf-8")
        self.assertEqual(map_problems(readme, ROOT), [])

    def test_a_module_missing_or_gone_is_reported(self):
        with tempfile.TemporaryDirectory() as folder:
            root = Path(folder)
            files = ["models.py", "forms.py", "sync/web.py", "sync/runs.py"]
            for name in ["__init__.py", "sync/__init__.py", *files]:
                (root / "kb" / name).parent.mkdir(parents=True, exist_ok=True)
                (root / "kb" / name).write_text("")
            readme = (
                "## Where things are\n\n| path | what it does |\n|---|---|\n"
                "| `kb/models.py` | the tables |\n"
                "| `kb/reranking.py` | moved away |\n"
                "| `kb/sync/` | `web` (sites), `origins` (folders) |\n"
                "\n## Using it\n"
            )
            self.assertEqual(
                map_problems(readme, root),
                [
                    "kb/reranking.py is listed but does not exist",
                    "kb/forms.py is missing from the map",
                    "kb/sync/origins.py is named but does not exist",
                    "kb/sync/runs.py is missing from its package's row",
                ],
            )


# --- the settings ------------------------------------------------------------------


def variables_read(source: str) -> set[str]:
    """The environment variables Python source reads by a literal name."""
    return {a or b for a, b in ENV_READ.findall(source)}


def variables_documented(markdown: str) -> set[str]:
    """The variables named in the first column of the page's tables."""
    found = set()
    for line in markdown.splitlines():
        if line.startswith("|"):
            first = line.strip("|").split("|")[0]
            found |= {
                t for t in CODE.findall(first) if re.fullmatch(r"[A-Z][A-Z0-9_]*", t)
            }
    return found


class ConfigurationTestCase(SimpleTestCase):
    def setUp(self):
        self.read = set()
        for path in sorted((ROOT / "config").glob("*.py")):
            self.read |= variables_read(path.read_text("utf-8"))
        page = (ROOT / "docs" / "configuration.md").read_text("utf-8")
        self.documented = variables_documented(page)

    def test_every_variable_the_settings_read_is_documented(self):
        self.assertIn("KB_JOB_TIMEOUT", self.read)  # the reader finds envint(...)
        self.assertEqual(sorted(self.read - TEST_ONLY - self.documented), [])

    def test_every_documented_variable_is_read(self):
        self.assertEqual(sorted(self.documented - self.read), [])

    def test_each_way_of_reading_a_variable_is_found(self):
        source = (
            'A = os.environ.get("DATABASE_URL")\n'
            "B = os.environ['KB_DB_NAME']\n"
            'C = envint("KB_JOB_TIMEOUT", 1800)\n'
            'D = envfloats("KB_MODEL_FLOORS")\n'
            'E = "PYTEST_VERSION" in os.environ\n'
            'os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")\n'
        )
        self.assertEqual(
            variables_read(source),
            {
                "DATABASE_URL",
                "KB_DB_NAME",
                "KB_JOB_TIMEOUT",
                "KB_MODEL_FLOORS",
                "PYTEST_VERSION",
            },
        )


# --- the links ---------------------------------------------------------------------


def prose(markdown: str) -> str:
    """The text without code blocks and code spans, where a link is no link."""
    return CODE.sub("", FENCE.sub("", markdown))


def anchors(markdown: str) -> set[str]:
    """The ids GitHub gives the headings: lower case, punctuation dropped, spaces
    as hyphens, "-1", "-2" after a repeated one."""
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *$", FENCE.sub("", markdown), re.M):
        text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        unique, n = slug, 0
        while unique in found:
            n += 1
            unique = f"{slug}-{n}"
        found.add(unique)
    return found


def link_problems(path: Path) -> list[str]:
    """The relative links of a Markdown file that lead nowhere."""
    problems = []
    for target in LINK.findall(prose(path.read_text("utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue  # https:, mailto:: not a file of the repository
        name, _, anchor = target.partition("#")
        linked = (path.parent / name).resolve() if name else path
        if not linked.exists():
            problems.append(f"{path.name}: {target} does not exist")
        elif anchor and linked.suffix == ".md":
            if anchor not in anchors(linked.read_text("utf-8")):
                problems.append(f"{path.name}: {target} names no heading")
    return problems


class LinksTestCase(SimpleTestCase):
    def test_every_relative_link_of_the_docs_leads_somewhere(self):
        self.assertIn(ROOT / "docs" / "configuration.md", DOCS)
        problems = [problem for path in DOCS for problem in link_problems(path)]
        self.assertEqual(problems, [])

    def test_a_broken_link_or_anchor_is_reported(self):
        with tempfile.TemporaryDirectory() as folder:
            root = Path(folder)
            (root / "docs").mkdir()
            (root / "docs" / "a.md").write_text("# A\n\n## What `make run` starts\n")
            readme = root / "README.md"
            readme.write_text(
                "[ok](docs/a.md#what-make-run-starts) [gone](docs/b.md) "
                "[heading](docs/a.md#nowhere) [web](https://example.org/x) "
                "`[code](not/a/link)`\n"
            )
            self.assertEqual(
                link_problems(readme),
                [
                    "README.md: docs/b.md does not exist",
                    "README.md: docs/a.md#nowhere names no heading",
                ],
            )

    def test_headings_get_githubs_ids(self):
        markdown = "# kb\n## A model (multilingual-e5-small)\n## Notes\n## Notes\n"
        self.assertEqual(
            anchors(markdown),
            {"kb", "a-model-multilingual-e5-small", "notes", "notes-1"},
        )
