"""What users of ruff and flake8 reach for, through the command line as they run it: one line
per finding, counts that agree between `memlint` and `memlint --fix`, notebooks left alone when
a cell does not parse, SARIF and GitHub paths from the repository's root, statistics as JSON,
and the usual options (-o, -q, --show-fixes, --color, -V, `explain` by name)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from test_cli import BAD, REPO, memlint, write

MULTILINE = textwrap.dedent("""\
    import torch


    def evaluate(model, loader):
        total = 0
        for x in loader:
            total += (model(x).sum()  # noqa: E501
                      * 2)
        return total
""")
EVALUATE = textwrap.dedent("""\
    import torch


    def evaluate(model, loader):
        model.eval()
        outs = []
        total = 0
        for x, y in loader:
            out = model(x)
            loss = torch.nn.functional.cross_entropy(out, y)
            outs.append(out)
            total += loss
        return total / len(loader)
""")
TRAIN = textwrap.dedent("""\
    import torch

    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in data:
        loss = model(x).sum()
        loss.backward()
        optimizer.step()
""")
_FINDING = re.compile(r"^[^:]+:(cell \d+:)?\d+:\d+: MEM\d{3} ")


# -- 4: one line per finding ---------------------------------------------------------------
def test_a_message_quoting_code_over_several_lines_is_one_line(tmp_path):
    write(tmp_path, "evaluate.py", MULTILINE)
    result = memlint(tmp_path, "evaluate.py", opt_in=False)
    lines = result.stdout.splitlines()
    assert "evaluate.py:7:9: MEM201" in result.stdout
    assert all(_FINDING.match(line) for line in lines[:-2]), lines  # then the summary's two lines
    mem201 = next(line for line in lines if " MEM201 " in line)
    assert "noqa" not in mem201 and "#" not in mem201  # the quoted code without its comment
    assert "`(model(x).sum() * 2).detach()`" in mem201
    for item in json.loads(memlint(tmp_path, "--output-format", "json", "evaluate.py").stdout):
        assert "\n" not in item["message"]


def test_every_message_is_one_line_whatever_a_rule_writes():
    from memlint.engine import check
    from memlint.rule import Rule

    class Quoting(Rule):
        CODE, NAME, MESSAGE = "MEM999", "quoting", "unused"

        def visit_Call(self, node):
            self.report(node, "calls `f(\n    1,\r\n)` here")

    [finding] = check("import torch\nf(\n    1,\n)\n", "x.py", [Quoting]).findings
    assert finding.message == "calls `f( 1, )` here"


# -- 7: counts after --fix -----------------------------------------------------------------
def test_findings_a_fix_makes_vanish_are_counted_as_fixed(tmp_path):
    path = write(tmp_path, "evaluate.py", EVALUATE)
    lint = memlint(tmp_path, "evaluate.py", opt_in=False)
    assert "Found 3 errors." in lint.stdout  # MEM203, MEM202, MEM201
    diff = memlint(tmp_path, "--diff", "evaluate.py", opt_in=False)
    assert "Would fix 3 errors (0 remaining)." in diff.stderr
    fixed = memlint(tmp_path, "--fix", "evaluate.py", opt_in=False)
    assert fixed.stdout.splitlines()[-1] == "Found 3 errors (3 fixed, 0 remaining)."
    assert "with torch.no_grad():" in path.read_text()


# -- 8: a notebook with a cell that does not parse ------------------------------------------
def _notebook(*sources: str) -> str:
    cells = [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
              "source": source.splitlines(keepends=True)} for source in sources]
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1) + "\n"


def test_fix_leaves_a_notebook_alone_when_one_of_its_cells_does_not_parse(tmp_path):
    text = _notebook(BAD, "def broken(:\n    pass\n")
    path = write(tmp_path, "study.ipynb", text)
    result = memlint(tmp_path, "--fix", "study.ipynb")
    assert result.returncode == 2
    assert path.read_text() == text
    assert "study.ipynb: error: cell 2: cannot parse" in result.stderr
    assert "study.ipynb:cell 1:4:5: MEM101" in result.stdout  # still reported, not fixed
    diff = memlint(tmp_path, "--diff", "study.ipynb")
    assert diff.returncode == 2 and "+++" not in diff.stdout


# -- 9: flake8's --disable-noqa -------------------------------------------------------------
def test_flake8_disable_noqa_shows_memlint_findings_hidden_by_noqa(tmp_path):
    write(tmp_path, "train.py", BAD.replace("torch.randn(n, n)", "torch.randn(n, n)  # noqa: MEM101"))
    command = [sys.executable, "-m", "flake8", "--isolated", "--select", "MEM", "--extend-select", "MEM101",
               "train.py"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    hidden = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert hidden.stdout == ""
    shown = subprocess.run([*command, "--disable-noqa"], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=120)
    assert "train.py:4:5: MEM101" in shown.stdout


# -- 10: SARIF and GitHub annotations from the repository's root ----------------------------
@pytest.fixture
def repository(tmp_path) -> Path:
    (tmp_path / ".git").mkdir()
    write(tmp_path, "pyproject.toml", '[tool.memlint]\nextend-select = ["MEM101"]\n')
    write(tmp_path, "tests/test_x.py", BAD)
    write(tmp_path, "edge/uni.py", BAD)
    write(tmp_path, "train.py", TRAIN)
    return tmp_path


def test_github_annotations_name_files_from_the_repository_root(repository):
    result = memlint(repository / "tests", "--output-format", "github", "test_x.py", "../edge/uni.py",
                     opt_in=False)
    files = re.findall(r"file=([^,]+),", result.stdout)
    assert files == ["tests/test_x.py", "edge/uni.py"]


def test_sarif_locations_fingerprints_and_levels(repository):
    result = memlint(repository / "tests", "--output-format", "sarif", "test_x.py", "../edge/uni.py",
                     "../train.py", opt_in=False)
    run = json.loads(result.stdout)["runs"][0]
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == repository.as_uri() + "/"
    uris = [r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in run["results"]]
    assert uris == ["tests/test_x.py", "edge/uni.py", "train.py"]
    levels = {r["ruleId"]: r["level"] for r in run["results"]}
    assert levels == {"MEM101": "note", "MEM301": "error"}  # opt-in: note; wrong gradients: error
    rule_levels = {r["id"]: r["defaultConfiguration"]["level"] for r in run["tool"]["driver"]["rules"]}
    assert (rule_levels["MEM101"], rule_levels["MEM201"], rule_levels["MEM301"]) == ("note", "warning", "error")
    fingerprints = [r["partialFingerprints"] for r in run["results"]]
    assert all(set(f) == {"memlint/v1"} for f in fingerprints)
    assert len({f["memlint/v1"] for f in fingerprints}) == 3

    moved = repository / "tests" / "test_x.py"  # lines added above: the finding keeps its fingerprint
    moved.write_text("# a comment\n\n" + moved.read_text())
    again = memlint(repository / "tests", "--output-format", "sarif", "test_x.py", "../edge/uni.py",
                    "../train.py", opt_in=False)
    results = json.loads(again.stdout)["runs"][0]["results"]
    assert results[0]["locations"][0]["physicalLocation"]["region"]["startLine"] == 6
    assert [r["partialFingerprints"] for r in results] == fingerprints


def test_github_annotations_carry_the_level_of_each_rule(repository):
    result = memlint(repository, "--output-format", "github", "train.py", "edge/uni.py", opt_in=False)
    assert result.stdout.startswith("::error file=train.py,")
    assert "\n::notice file=edge/uni.py," in result.stdout


# -- 11: the README's flake8 example shows syntax errors ------------------------------------
def test_the_readme_flake8_commands_report_syntax_errors(tmp_path):
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## flake8"):]
    commands = re.findall(r"^(flake8 [^#\n]*?)\s*(?:#.*)?$", section[:section.index("\n## ", 1)], re.MULTILINE)
    assert commands
    write(tmp_path, "train.py", "import torch\ndef broken(:\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for command in commands:
        words = command.split()
        result = subprocess.run([sys.executable, "-m", "flake8", "--isolated", *words[1:]], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=120)
        assert "E999" in result.stdout, (command, result.stdout)


# -- 12: statistics as JSON -----------------------------------------------------------------
def test_statistics_with_json_output_are_json(tmp_path):
    write(tmp_path, "a.py", BAD)
    write(tmp_path, "b.py", BAD)
    result = memlint(tmp_path, "--statistics", "--output-format", "json", ".")
    assert result.returncode == 1
    assert json.loads(result.stdout) == [
        {"code": "MEM101", "name": "tensor-alloc-in-loop", "count": 2, "fixable": True}]
    other = memlint(tmp_path, "--statistics", "--output-format", "sarif", ".")
    assert other.returncode == 2 and "--statistics" in other.stderr


# -- 13: the options users reach for ---------------------------------------------------------
def test_output_file_takes_what_stdout_would_have(tmp_path):
    write(tmp_path, "train.py", BAD)
    result = memlint(tmp_path, "--output-format", "json", "-o", "out/report.json", "train.py")
    assert result.returncode == 1 and result.stdout == ""
    [item] = json.loads((tmp_path / "out" / "report.json").read_text())
    assert item["code"] == "MEM101"
    memlint(tmp_path, "--output-file", "report.txt", "train.py")
    assert (tmp_path / "report.txt").read_text().startswith("train.py:4:5: MEM101")


def test_quiet_prints_findings_and_nothing_else(tmp_path):
    write(tmp_path, "train.py", BAD)
    result = memlint(tmp_path, "-q", "train.py")
    assert result.returncode == 1
    assert result.stdout.splitlines() == [line for line in memlint(tmp_path, "train.py").stdout.splitlines()
                                          if _FINDING.match(line)]
    write(tmp_path, "ok.py", "import torch\n")
    assert memlint(tmp_path, "--quiet", "ok.py").stdout == ""


def test_show_fixes_lists_what_fix_changed(tmp_path):
    write(tmp_path, "evaluate.py", EVALUATE)
    write(tmp_path, "train.py", BAD)
    result = memlint(tmp_path, "--fix", "--show-fixes", "evaluate.py", "train.py")
    assert result.stdout.splitlines() == [
        "Fixed 4 errors:",
        "- evaluate.py:",
        "    1 × MEM201 (accumulate-history)",
        "    1 × MEM202 (retained-outputs)",
        "    1 × MEM203 (eval-without-no-grad)",
        "- train.py:",
        "    1 × MEM101 (tensor-alloc-in-loop)",
        "",
        "Found 4 errors (4 fixed, 0 remaining).",
    ]


def test_color_is_used_on_request_and_on_a_terminal_only(tmp_path):
    write(tmp_path, "train.py", BAD)
    coloured = memlint(tmp_path, "--color", "always", "train.py").stdout
    assert "\x1b[" in coloured
    assert re.sub(r"\x1b\[[0-9;]*m", "", coloured) == memlint(tmp_path, "train.py").stdout
    assert "\x1b[" not in memlint(tmp_path, "--color", "auto", "train.py").stdout  # a pipe is no terminal
    assert "\x1b[" not in memlint(tmp_path, "--color", "never", "train.py").stdout
    assert memlint(tmp_path, "--color", "sometimes", "train.py").returncode == 2


def test_color_auto_on_a_terminal_and_no_color(tmp_path):
    import pty

    write(tmp_path, "train.py", BAD)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("NO_COLOR", None)

    def on_terminal(extra_env):
        leader, follower = pty.openpty()
        process = subprocess.Popen([sys.executable, "-m", "memlint", "--extend-select", "MEM101", "train.py"],
                                   cwd=tmp_path, env={**env, **extra_env}, stdout=follower, stderr=subprocess.DEVNULL)
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        process.wait(timeout=120)
        os.close(leader)
        return b"".join(chunks).decode()

    assert "\x1b[" in on_terminal({})
    assert "\x1b[" not in on_terminal({"NO_COLOR": "1"})


def test_short_version_flag(tmp_path):
    from memlint import __version__

    for flag in ("-V", "--version"):
        result = memlint(tmp_path, flag)
        assert result.returncode == 0 and result.stdout.strip() == f"memlint {__version__}"


def test_explain_by_rule_name(tmp_path):
    result = memlint(tmp_path, "explain", "eval-without-no-grad")
    assert result.returncode == 0
    assert result.stdout.startswith("# MEM203 eval-without-no-grad")
    assert memlint(tmp_path, "explain", "no-such-rule").returncode == 2
