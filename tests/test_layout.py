"""The project's shape: who may import whom, one reader of the environment, no hook paths in pages,
the README's layout and settings tables, its notebook example, and every error code's message."""
import ast
import json
import os
import re
from pathlib import Path

import pytest

from service.settings import SETTINGS
from transformer_core.errors import ExplorerError, known_codes

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def py_files(*folders: str) -> list[Path]:
    return [p for f in folders for p in ((ROOT / f).rglob("*.py") if (ROOT / f).is_dir() else [ROOT / f])]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return {n.split(".")[0] for n in names}


def test_the_core_imports_neither_the_server_package_nor_streamlit():
    for path in py_files("transformer_core"):
        assert not imported_modules(path) & {"service", "streamlit", "ui"}, path


def test_pages_hold_memory_only_through_the_one_computation_helper():
    """Every page reaches the memory budget through ui.tools (prepared / reserve), never service.budget itself."""
    for path in py_files("pages"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "service"
                 for a in n.names} | {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not names & {"budget", "service.budget"}, path


def test_the_service_package_does_not_import_streamlit_or_the_ui():
    for path in py_files("service"):
        assert not imported_modules(path) & {"streamlit", "ui"}, path


MAX_ROOM_LINES = 300  # a module of ui/ or service/ holds one concern: beyond this it is two


def test_every_ui_and_service_module_is_one_room():
    """Every file of ui/ and service/ stays under MAX_ROOM_LINES lines (split by concern when it grows)."""
    big = {str(p.relative_to(ROOT)): n for folder in ("ui", "service") for p in (ROOT / folder).glob("*.py")
           if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_ROOM_LINES}
    assert big == {}, f"split by concern: {big}"


def test_only_the_settings_module_reads_environment_variables():
    readers = [p for p in py_files("app.py", "pages", "ui", "transformer_core", "service")
               if re.search(r"os\.environ|os\.getenv|getenv\(", p.read_text(encoding="utf-8"))]
    assert readers == [ROOT / "service" / "settings.py"]


def test_every_download_button_is_the_one_that_does_not_rerun_the_page():
    """Only ui.widgets.download calls st.download_button (with on_click="ignore": see its docstring)."""
    callers = [p for p in py_files("app.py", "pages", "ui") if "st.download_button(" in p.read_text(encoding="utf-8")]
    assert callers == [ROOT / "ui" / "widgets.py"]
    assert 'on_click="ignore"' in (ROOT / "ui" / "widgets.py").read_text(encoding="utf-8")


def test_no_page_or_ui_module_spells_a_hook_path():
    for path in py_files("pages", "ui"):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"hook_[a-z]|\.layers\.|self_attn|cross_attn", text), path


def test_every_page_in_the_folder_is_in_the_navigation_once_and_nothing_else():
    listed = re.findall(r'\bpage\(\s*"([a-z_]+)"', (ROOT / "app.py").read_text(encoding="utf-8"))
    files = sorted(p.stem.split("_", 1)[-1] for p in (ROOT / "pages").glob("*.py"))
    assert sorted(listed) == files and len(set(listed)) == len(listed)


def test_pages_link_to_each_other_by_name_never_by_file():
    for path in py_files("pages", "ui", "app.py"):
        assert not re.search(r'"pages/[^"]*\.py"', path.read_text(encoding="utf-8")), path


def readme_table(heading: str) -> list[str]:
    section = README.split(heading, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([^`]+)` \|", section, flags=re.M)


def test_readme_layout_table_matches_the_tree():
    listed = set(readme_table("## Layout"))
    tree = {p.name + "/" for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")
            and p.name not in {"checkpoints", "artifacts", "screenshots"} and "cache" not in p.name}
    tree |= {"app.py", "transformer_core/errors.py"}
    tree |= {f"{top}/{p.name}/" for top in ("transformer_core", "tests") for p in (ROOT / top).iterdir()
             if p.is_dir() and (p / "__init__.py").is_file()}
    assert listed == tree


TEST_LAYERS = {"core", "service", "ui", "browser"}


def imports_and_path_edits(path: Path) -> tuple[set[str], bool, set[str]]:
    """(the modules a file imports, full dotted names; whether it edits sys.path; its string constants)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    mods, edits, consts = set(), False, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            mods.add(node.module)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in {
                "insert", "append"} and ast.unparse(node.func.value) == "sys.path":
            edits = True
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            consts.add(node.value)
    return mods, edits, consts


def test_tests_sit_in_their_layer_and_share_code_through_the_harness():
    """tests/<layer>/ per floor (core, service, ui through AppTest, browser through Chromium), project-wide checks at
    the top. What tests and benches share is in harness/, fixtures in conftest.py: no test imports another test
    module or a conftest, nothing that edits sys.path names tests/, harness/ imports neither tests nor bench, and
    only tests/browser/ drives Chromium."""
    tests = ROOT / "tests"
    assert {p.name for p in tests.iterdir() if (p / "__init__.py").is_file()} == TEST_LAYERS
    assert sorted(p.name for p in tests.glob("test_*.py")) == ["test_layout.py", "test_lint.py"]
    for path in py_files("tests", "bench", "harness"):
        mods, edits_path, consts = imports_and_path_edits(path)
        tops, where = {m.split(".")[0] for m in mods}, path.relative_to(ROOT)
        assert not {m for m in tops if m.startswith("test_") or m == "conftest"}, where
        assert not (edits_path and {c for c in consts if c == "tests" or c.startswith("tests/")}), where
        if path.is_relative_to(ROOT / "harness"):
            assert not tops & {"tests", "bench", "common"}, where
        elif path.is_relative_to(tests) and not path.is_relative_to(tests / "browser"):
            assert not mods & {"harness.browser", "playwright.sync_api", "playwright.async_api"}, where


def test_readme_settings_table_lists_every_setting():
    listed = set(readme_table("### Settings"))
    assert listed == {s.env for s in SETTINGS.values()}


def test_readme_notebook_example_runs():
    section = README.split("## Using transformer_core from a notebook", 1)[1]
    code = section.split("```python", 1)[1].split("```", 1)[0]
    exec(compile(code, "README notebook example", "exec"), {})


def raised_codes() -> set[str]:
    """Every literal code passed to an ExplorerError (or a subclass) anywhere in the project."""
    families = {c.__name__ for c in _subclasses(ExplorerError)} | {"Gpt2LoadError"}
    codes = set()
    for path in py_files("transformer_core", "service", "ui", "pages"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in families:
                first = node.args[0] if node.args else None
                if isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value.isidentifier():
                    codes.add(first.value)  # (CorpusError's first argument is a detail sentence, not a code)
                elif isinstance(first, ast.JoinedStr) and isinstance(first.values[0], ast.Constant):  # f"empty_{x}"
                    codes |= {c for c in known_codes() if c.startswith(first.values[0].value)}
    return codes


def _subclasses(cls):
    import service.jobs  # noqa: F401 - defines the job errors

    out = {cls}
    for sub in cls.__subclasses__():
        out |= _subclasses(sub)
    return out


def test_every_error_code_raised_has_a_message_in_both_languages():
    messages = json.loads((ROOT / "assets" / "strings" / "errors.json").read_text(encoding="utf-8"))
    codes = raised_codes() | {c.code for c in _subclasses(ExplorerError)}
    assert len(codes) > 40
    for code in codes:
        entry = messages.get(f"err.{code}")
        assert entry and entry["en"].strip() and entry["zh"].strip(), code


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_error_messages_fill_their_parameters(lang):
    err = ExplorerError("config_heads", d_model=10, heads=3)
    assert "10" in err.text(lang) and "3" in err.text(lang) and "{" not in err.text(lang)


# Each module is imported by a child forked from one interpreter that has imported only these third-party packages
# (never a project module): a project import cycle still fails, and no child pays torch's import again (a fresh
# interpreter per module took 115 s of the suite on 2 cores).
FORK_SERVER = """
import importlib, os, sys, traceback
import numpy, tiktoken, torch  # noqa: F401 - third-party only: what every child would import anyway
assert not [m for m in sys.modules if m.split(".")[0] in ("transformer_core", "service", "ui")]
failed = []
for m in sys.argv[1:]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            importlib.import_module(m)
            code = 0
        except BaseException:
            os.write(write, traceback.format_exc()[-300:].encode())
            code = 1
        os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        why = f.read().decode(errors="replace")
    if os.waitpid(pid, 0)[1]:
        failed.append((m, why))
print(repr(failed))
"""


def test_every_core_module_imports_on_its_own_in_a_fresh_interpreter():
    """No import cycles: `import transformer_core.train.translation` (or any module) works as the first import."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    modules = sorted(".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
                     for p in (root / "transformer_core").rglob("*.py"))
    if not hasattr(os, "fork"):  # Windows: a fresh interpreter per module
        failed = [(m, done.stderr[-300:]) for m in modules
                  if (done := subprocess.run([sys.executable, "-c", f"import {m}"], cwd=root, capture_output=True,
                                             text=True)).returncode]
    else:
        done = subprocess.run([sys.executable, "-c", FORK_SERVER, *modules], cwd=root, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        failed = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert len(modules) > 50 and not failed, failed


def module_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports (at the top or inside a function: a cycle either way)."""
    mods = {}
    for pkg in ("transformer_core", "service", "ui"):
        for f in (ROOT / pkg).rglob("*.py"):
            parts = f.relative_to(ROOT).with_suffix("").parts
            mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    graph = {}
    for name, f in mods.items():
        package = name if f.name == "__init__.py" else name.rpartition(".")[0]
        deps = set()
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            else:
                continue
            for t in targets:
                while t and t not in mods and "." in t:
                    t = t.rpartition(".")[0]
                if t in mods and t != name and not name.startswith(t + "."):  # a package's own parents load first
                    deps.add(t)
        graph[name] = deps
    return graph


def test_no_import_cycle_between_modules():
    graph = module_graph()
    assert len(graph) > 60
    state: dict[str, int] = {}

    def visit(m, path):
        state[m] = 1
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(d):] + [d]))
            if d not in state:
                visit(d, path + [d])
        state[m] = 2
    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
