"""The flake8 plugin, through the real `flake8` as a user runs it: the same findings at the same
line and column as `memlint`, flake8's selection, ignores and `# noqa`, and no crash on bad input."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List, Set, Tuple

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
OPT_IN = ["MEM101", "MEM204", "MEM303"]
_LOCATION = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+):(?P<col>\d+): (?P<code>[A-Z]+\d+) ")

Found = Set[Tuple[str, int, int, str]]


def _env():
    return {**os.environ, "PYTHONPATH": str(REPO)}


def flake8(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "flake8", "--isolated", *args], cwd=cwd, env=_env(),
                            capture_output=True, text=True, timeout=300)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def memlint(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "memlint", *args], cwd=cwd, env=_env(),
                            capture_output=True, text=True, timeout=300)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def found(output: str, prefix: str = "MEM") -> Found:
    matches = (_LOCATION.match(line) for line in output.splitlines())
    return {(m["path"], int(m["line"]), int(m["col"]), m["code"])
            for m in matches if m is not None and m["code"].startswith(prefix)}


@pytest.fixture(scope="module")
def fixture_tree(tmp_path_factory) -> Path:
    """The fixtures and the example, copied away from this repository's own configuration."""
    root = tmp_path_factory.mktemp("tree")
    shutil.copytree(FIXTURES, root / "fixtures")
    shutil.copytree(REPO / "examples", root / "examples")
    return root


def test_flake8_reports_what_memlint_reports_at_the_same_line_and_column(fixture_tree):
    ours = found(memlint(fixture_tree, "fixtures", "examples").stdout)
    theirs = found(flake8(fixture_tree, "--select", "MEM", "fixtures", "examples").stdout)
    assert len(ours) >= 15  # every fixture's rule at least once, and the example's seven
    assert theirs == ours
    assert {code for *_, code in ours}.isdisjoint(OPT_IN)  # `--select MEM` keeps opt-in rules off


def test_opt_in_rules_match_too_when_selected_by_their_code(fixture_tree):
    ours = found(memlint(fixture_tree, "--extend-select", ",".join(OPT_IN), "fixtures").stdout)
    theirs = found(flake8(fixture_tree, "--select", "MEM", "--extend-select", ",".join(OPT_IN), "fixtures").stdout)
    assert {code for *_, code in ours} >= set(OPT_IN)
    assert theirs == ours


@pytest.fixture
def project(tmp_path) -> Path:
    shutil.copy(FIXTURES / "MEM204-missing-del" / "before.py", tmp_path / "lm.py")  # MEM204, opt-in
    shutil.copy(REPO / "examples" / "train_bad.py", tmp_path / "train.py")  # default rules
    return tmp_path


def codes(result: subprocess.CompletedProcess) -> List[str]:
    return sorted({code for _, _, _, code in found(result.stdout)})


@pytest.mark.parametrize("args,expected", [
    ([], ["MEM201", "MEM202", "MEM203", "MEM301", "MEM401"]),
    (["--extend-select", "MEM204"], ["MEM201", "MEM202", "MEM203", "MEM204", "MEM301", "MEM401"]),
    (["--extend-select", "MEM402"], ["MEM201", "MEM202", "MEM203", "MEM301", "MEM401", "MEM402"]),
    (["--select", "MEM204"], ["MEM204"]),
    (["--select", "MEM2"], ["MEM201", "MEM202", "MEM203"]),  # a prefix picks the default rules only
    (["--select", "MEM1"], []),  # MEM101, the only one of MEM1 that train.py shows, is opt-in
    (["--extend-select", "MEM101", "--extend-ignore", "MEM2,MEM4"], ["MEM101", "MEM301"]),
    (["--select", "MEM", "--extend-select", "MEM101,MEM402", "--ignore", "MEM401"],
     ["MEM101", "MEM201", "MEM202", "MEM203", "MEM301", "MEM402"]),
])
def test_flake8_selection_decides(project, args, expected):
    result = flake8(project, *args, "lm.py", "train.py")
    assert codes(result) == expected


def test_per_file_ignores_and_noqa(project):
    train = project / "train.py"
    text = train.read_text(encoding="utf-8")
    line = next(line for line in text.splitlines() if "torch.randn" in line and "noise" in line)
    train.write_text(text.replace(line, line + "  # noqa: MEM101"), encoding="utf-8")
    result = flake8(project, "--extend-select", "MEM101", "--per-file-ignores", "train.py:MEM402", "train.py")
    assert codes(result) == ["MEM201", "MEM202", "MEM203", "MEM301", "MEM401"]


def test_a_file_that_does_not_parse_gets_flake8s_own_error_and_the_rest_is_checked(project):
    (project / "broken.py").write_text("import torch\n\ndef f(:\n    pass\n", encoding="utf-8")
    result = flake8(project, "--extend-select", "MEM101", "broken.py", "train.py")
    assert result.returncode == 1
    assert re.search(r"^broken\.py:3:\d+: E999 SyntaxError", result.stdout, re.MULTILINE), result.stdout
    assert not [where for where in found(result.stdout) if where[0] == "broken.py"]
    assert "MEM101" in codes(result)


def test_source_libcst_cannot_parse_yields_nothing_instead_of_stopping_flake8():
    # flake8 runs tree plugins only on files its `ast` parse accepted; should LibCST still
    # refuse one, the plugin yields nothing rather than raising into flake8.
    from memlint.flake8_plugin import MemlintChecker

    lines = ["import torch\n", "def f(:\n"]
    assert list(MemlintChecker(tree=None, lines=lines, filename="x.py").run()) == []  # type: ignore[arg-type]


def test_the_plugin_does_not_compile_again_what_flake8_has_parsed(monkeypatch):
    # flake8 hands tree plugins only files its own parse accepted: memlint's syntax gate (a
    # compile() of the whole file, a tenth of memlint's time) would do that work twice.
    import memlint.engine as engine
    from memlint.flake8_plugin import MemlintChecker

    def compiled_again(source, path):
        raise AssertionError("compiled a second time")

    monkeypatch.setattr(engine, "compiles", compiled_again)
    source = (FIXTURES / "MEM201-accumulate-history" / "before.py").read_text(encoding="utf-8")
    found = list(MemlintChecker(tree=None, lines=source.splitlines(keepends=True),  # type: ignore[arg-type]
                                filename="before.py").run())
    assert any(message.startswith("MEM201 ") for _, _, message, _ in found)
