"""The command line as a user runs it: a subprocess in a scratch folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

BAD = textwrap.dedent("""\
    import torch

    for step in range(10):
        noise = torch.randn(n, n)
        loss = model(noise).sum()
""")
FIXED = textwrap.dedent("""\
    import torch

    noise = torch.empty(n, n)
    for step in range(10):
        noise.normal_()
        loss = model(noise).sum()
""")
MOVED = textwrap.dedent("""\
    import torch
    for step in range(10):
        noise = torch.randn(n, n).cuda()
        loss = model(noise).sum()
""")
CLEAN = "import torch\nx = torch.randn(4)\n"


# MEM101, the example rule of these tests, is opt-in: a check run selects it unless told not to.
OPT_IN = ("--extend-select", "MEM101")
COMMANDS = ("check", "rules", "explain", "verify")


def with_opt_in(args, opt_in: bool = True):
    """`args` for a check run with the example rule selected."""
    if not opt_in or (args and args[0] in COMMANDS and args[0] != "check"):
        return list(args)
    return [*args[:1], *OPT_IN, *args[1:]] if args and args[0] == "check" else [*OPT_IN, *args]


def memlint(cwd: Path, *args: str, opt_in: bool = True):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-m", "memlint", *with_opt_in(args, opt_in)], cwd=cwd, env=env,
                            capture_output=True, text=True, timeout=120)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_reports_finding_with_position_hint_and_summary(tmp_path):
    write(tmp_path, "train.py", BAD)
    result = memlint(tmp_path, "train.py")
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith("train.py:4:5: MEM101 [*] `noise` gets a new same-shaped tensor")
    assert "Found 1 error." in lines
    assert "[*] 1 fixable with the `--fix` option." in lines


def test_check_subcommand_and_clean_exit(tmp_path):
    write(tmp_path, "ok.py", CLEAN)
    result = memlint(tmp_path, "check", "ok.py")
    assert result.returncode == 0
    assert result.stdout.strip() == "All checks passed!"


def test_fix_writes_the_file_and_exits_zero_when_nothing_remains(tmp_path):
    path = write(tmp_path, "train.py", BAD)
    result = memlint(tmp_path, "--fix", "train.py")
    assert result.returncode == 0, result.stdout
    assert path.read_text() == FIXED
    assert "(1 fixed, 0 remaining)" in result.stdout


def test_fix_exits_one_when_findings_remain(tmp_path):
    path = write(tmp_path, "train.py", MOVED)  # its fix is unsafe: not applied by --fix
    result = memlint(tmp_path, "--fix", "train.py")
    assert result.returncode == 1
    assert path.read_text() == MOVED


def test_diff_prints_the_change_and_writes_nothing(tmp_path):
    path = write(tmp_path, "train.py", BAD)
    result = memlint(tmp_path, "--diff", "train.py")
    assert result.returncode == 1
    assert path.read_text() == BAD
    assert "--- a/train.py" in result.stdout and "+++ b/train.py" in result.stdout
    assert "-    noise = torch.randn(n, n)" in result.stdout
    assert "+    noise.normal_()" in result.stdout
    assert "Would fix 1 error" in result.stderr


def test_unsafe_fix_is_hidden_then_applied_when_asked(tmp_path):
    path = write(tmp_path, "train.py", MOVED)
    result = memlint(tmp_path, "--select", "MEM101", "train.py")
    assert "MEM101 `noise`" in result.stdout  # no [*]: not fixable without --unsafe-fixes
    assert "(1 hidden fix can be enabled with the `--unsafe-fixes` option)" in result.stdout
    result = memlint(tmp_path, "--fix", "--unsafe-fixes", "train.py")
    assert result.returncode == 0
    assert 'noise = torch.empty(n, n, device="cuda")' in path.read_text()


def test_summary_counts_hidden_fixes_in_the_plural(tmp_path):
    write(tmp_path, "a.py", MOVED)
    write(tmp_path, "b.py", MOVED)
    result = memlint(tmp_path, "--select", "MEM101", ".")
    assert "Found 2 errors." in result.stdout
    assert "(2 hidden fixes can be enabled with the `--unsafe-fixes` option)" in result.stdout


def test_json_output_is_stable_and_carries_each_fix_diff(tmp_path):
    write(tmp_path, "train.py", BAD)
    result = memlint(tmp_path, "--output-format", "json", "train.py")
    assert result.returncode == 1
    [item] = json.loads(result.stdout)
    assert set(item) == {"code", "name", "message", "filename", "cell", "line", "column", "end_line",
                         "end_column", "fix"}
    assert item["cell"] is None  # a notebook's cell number; none in a .py file
    assert (item["code"], item["name"], item["filename"]) == ("MEM101", "tensor-alloc-in-loop", "train.py")
    assert (item["line"], item["column"], item["end_line"], item["end_column"]) == (4, 5, 4, 30)
    assert item["fix"]["safety"] == "safe"
    assert "+    noise.normal_()" in item["fix"]["diff"]


def test_statistics_and_exit_zero(tmp_path):
    write(tmp_path, "a.py", BAD)
    write(tmp_path, "b.py", BAD)
    result = memlint(tmp_path, "--statistics", "--exit-zero", ".")
    assert result.returncode == 0
    assert result.stdout.splitlines()[0] == "2\tMEM101\t[*] tensor-alloc-in-loop"


@pytest.mark.parametrize("args,reported", [
    ([], False),  # opt-in: not a default rule
    (["--select", "MEM101"], True),
    (["--select", "MEM1"], False),  # a prefix selects the default rules of the family
    (["--select", "ALL"], True),
    (["--extend-select", "MEM101"], True),
    (["--extend-select", "MEM101", "--ignore", "MEM101"], False),
    (["--select", "ALL", "--ignore", "MEM"], False),
    (["--select", "MEM2"], False),
    (["--select", "MEM2", "--extend-select", "MEM101"], True),
])
def test_selection(tmp_path, args, reported):
    write(tmp_path, "train.py", BAD)
    result = memlint(tmp_path, *args, "train.py", opt_in=False)
    assert ("MEM101" in result.stdout) is reported
    assert result.returncode == (1 if reported else 0)


@pytest.mark.parametrize("selector", ["MEM999", "E501", "mem1x"])
def test_unknown_selector_is_a_one_line_error(tmp_path, selector):
    write(tmp_path, "train.py", BAD)
    result = memlint(tmp_path, "--select", selector, "train.py")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""


def test_bad_inputs_are_one_line_errors_and_the_rest_is_linted(tmp_path):
    write(tmp_path, "syntax.py", "import torch\ndef broken(:\n")
    write(tmp_path, "plain_syntax.py", "def broken(:\n")
    (tmp_path / "binary.py").write_bytes(b"import torch\x00\x01")
    (tmp_path / "latin.py").write_bytes(b"import torch\nx = '\xe9'\n")
    write(tmp_path, "empty.py", "")
    write(tmp_path, "train.py", BAD)
    result = memlint(tmp_path, "syntax.py", "plain_syntax.py", "binary.py", "latin.py", "empty.py",
                     "missing.py", "train.py")
    assert result.returncode == 2
    errors = result.stderr.strip().splitlines()
    assert len(errors) == 5
    for name, words in [("syntax.py", "cannot parse"), ("plain_syntax.py", "cannot parse"),
                        ("binary.py", "binary"), ("latin.py", "not valid utf-8"),
                        ("missing.py", "no such file")]:
        assert any(line.startswith(f"{name}: error: ") and words in line for line in errors), errors
    assert "train.py:4:5: MEM101" in result.stdout  # the good file is still linted
    assert "empty.py" not in result.stderr  # an empty file is valid Python


def test_a_file_that_fails_to_parse_is_never_written(tmp_path):
    path = write(tmp_path, "syntax.py", "import torch\nfor i in x:\n    y = torch.randn(3)\n  bad\n")
    before = path.read_bytes()
    result = memlint(tmp_path, "--fix", "syntax.py")
    assert result.returncode == 2
    assert path.read_bytes() == before


def test_fix_keeps_encoding_newlines_and_permissions(tmp_path):
    source = ("# -*- coding: latin-1 -*-\r\nimport torch\r\nname = 'caf\xe9'\r\n"
              "for step in range(3):\r\n    x = torch.zeros(n)\r\n    x.add_(1)\r\n")
    path = tmp_path / "train.py"
    path.write_bytes(source.encode("latin-1"))
    path.chmod(0o750)
    result = memlint(tmp_path, "--fix", "train.py")
    assert result.returncode == 0, result.stdout + result.stderr
    data = path.read_bytes()
    assert b"caf\xe9" in data
    assert b"x = torch.empty(n)\r\nfor step" in data
    assert b"\r\n    x.zero_()\r\n" in data
    assert b"\n" not in data.replace(b"\r\n", b"")
    assert path.stat().st_mode & 0o777 == 0o750
    # no temporary left behind (the result cache is meant to stay)
    assert [p.name for p in tmp_path.iterdir() if p.name != ".memlint_cache"] == ["train.py"]


def test_fix_keeps_cr_only_line_endings_to_the_last_one(tmp_path):
    path = tmp_path / "train.py"
    path.write_bytes(BAD.replace("\n", "\r").encode())  # classic Mac OS line endings
    result = memlint(tmp_path, "--fix", "train.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert path.read_bytes() == FIXED.replace("\n", "\r").encode()


@pytest.mark.parametrize("comment,suppressed", [
    ("  # noqa", True),
    ("  # noqa: MEM101", True),
    ("  # noqa: MEM1", True),
    ("  # NOQA:MEM202,MEM101", True),
    ("  # noqa: MEM2", False),
    ("  # not a noqa comment", False),
])
def test_noqa_on_the_reported_line(tmp_path, comment, suppressed):
    path = write(tmp_path, "train.py", BAD.replace("torch.randn(n, n)", "torch.randn(n, n)" + comment))
    result = memlint(tmp_path, "train.py")
    assert ("MEM101" in result.stdout) is not suppressed
    memlint(tmp_path, "--fix", "train.py")
    assert ("noise.normal_()" in path.read_text()) is not suppressed  # --fix honours it too


def test_noqa_on_the_first_line_of_a_multiline_statement_and_file_level(tmp_path):
    multi = BAD.replace("torch.randn(n, n)", "torch.randn(  # noqa: MEM101\n        64,\n        64,\n    )")
    write(tmp_path, "multi.py", multi)
    write(tmp_path, "whole.py", "# memlint: noqa\n" + BAD)
    write(tmp_path, "in_string.py", BAD.replace("loss = model(noise).sum()", "loss = model(noise, '# noqa')"))
    result = memlint(tmp_path, "multi.py", "whole.py", "in_string.py")
    assert "multi.py" not in result.stdout and "whole.py" not in result.stdout
    assert "in_string.py:4:5: MEM101" in result.stdout


def _files_reported(result) -> list:
    return sorted({line.split(":")[0] for line in result.stdout.splitlines() if ": MEM" in line})


def test_folders_are_walked_honouring_gitignore_and_skipping_environments(tmp_path):
    (tmp_path / ".git").mkdir()
    write(tmp_path, ".gitignore", "generated/\n*_tmp.py\n")
    write(tmp_path, "src/train.py", BAD)
    write(tmp_path, "src/scratch_tmp.py", BAD)
    write(tmp_path, "generated/train.py", BAD)
    write(tmp_path, "src/.gitignore", "local.py\n")
    write(tmp_path, "src/local.py", BAD)
    write(tmp_path, ".venv/lib/site.py", BAD)
    write(tmp_path, "venv/lib/site.py", BAD)
    write(tmp_path, "build/lib/train.py", BAD)
    write(tmp_path, "notes.txt", BAD)
    assert _files_reported(memlint(tmp_path, ".")) == [os.path.join("src", "train.py")]
    # a file named explicitly is linted even when ignored
    assert "MEM101" in memlint(tmp_path, "generated/train.py").stdout


def test_vendored_code_is_not_walked_unless_named(tmp_path):
    write(tmp_path, "train.py", BAD)
    write(tmp_path, "third_party/clip/model.py", BAD)
    write(tmp_path, "inference/dependencies/AutoGPTQ/setup.py", "from setuptools import setup\nsetup()\n")
    write(tmp_path, "inference/dependencies/AutoGPTQ/examples/train.py", BAD)
    # the project's own code in folders of those names is still linted
    write(tmp_path, "inference/dependencies/pin.py", BAD)
    write(tmp_path, "lightning/trainer/setup.py", BAD)
    assert _files_reported(memlint(tmp_path, ".")) == [
        os.path.join("inference", "dependencies", "pin.py"), os.path.join("lightning", "trainer", "setup.py"), "train.py"]
    # as pre-commit names staged files, with --force-exclude: the vendored one is skipped
    staged = memlint(tmp_path, "--force-exclude", "train.py", "inference/dependencies/AutoGPTQ/examples/train.py")
    assert "train.py:" in staged.stdout and "AutoGPTQ" not in staged.stdout
    # a vendored folder named on the command line is linted
    named = memlint(tmp_path, "inference/dependencies/AutoGPTQ")
    assert os.path.join("examples", "train.py") in named.stdout and "MEM101" in named.stdout


def test_pyproject_configuration(tmp_path):
    write(tmp_path, "pyproject.toml", textwrap.dedent("""\
        [tool.memlint]
        exclude = ["legacy/"]
        per-file-ignores = {"tests/*.py" = ["MEM101"]}
        unsafe-fixes = true
    """))
    write(tmp_path, "legacy/old.py", BAD)
    write(tmp_path, "tests/test_x.py", BAD)
    path = write(tmp_path, "train.py", MOVED)
    result = memlint(tmp_path, ".")
    assert {line.split(":")[0] for line in result.stdout.splitlines() if ": MEM" in line} == {"train.py"}
    assert "MEM101 [*]" in result.stdout  # unsafe-fixes = true offers the unsafe fix
    memlint(tmp_path, "--fix", ".")
    assert "device=\"cuda\"" in path.read_text()
    # the CLI overrides the file
    assert "MEM101 [*]" not in memlint(tmp_path, "--no-unsafe-fixes", "train.py").stdout


def test_configuration_is_found_from_a_subfolder_and_select_works(tmp_path):
    write(tmp_path, "pyproject.toml", '[tool.memlint]\nselect = ["MEM101"]\n')  # the opt-in rule, by the file
    write(tmp_path, "pkg/train.py", BAD)
    assert memlint(tmp_path / "pkg", "train.py", opt_in=False).returncode == 1
    write(tmp_path, "pyproject.toml", '[tool.memlint]\nselect = ["MEM2"]\n')
    assert memlint(tmp_path / "pkg", "train.py", opt_in=False).returncode == 0


@pytest.mark.parametrize("table,words", [
    ('[tool.memlint]\nselct = ["MEM1"]\n', "unknown key `selct`"),
    ('[tool.memlint]\nselect = ["MEM999"]\n', "unknown rule code MEM999"),
    ('[tool.memlint]\nselect = "MEM101"\n', "must be a list of strings"),
    ('[tool.memlint]\nunsafe-fixes = "yes"\n', "must be true or false"),
    ('[tool.memlint\n', "cannot read"),
])
def test_bad_configuration_is_a_one_line_error(tmp_path, table, words):
    write(tmp_path, "pyproject.toml", table)
    write(tmp_path, "train.py", BAD)
    result = memlint(tmp_path, "train.py")
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert "pyproject.toml" in line and words in line


def test_a_broken_pyproject_without_a_memlint_table_is_a_warning(tmp_path):
    write(tmp_path, "pyproject.toml", '[project]\nname = "x\n[tool.black]\n')
    write(tmp_path, "train.py", BAD)
    result = memlint(tmp_path, "train.py")
    assert result.returncode == 1  # linted with the defaults
    assert "train.py:4:5: MEM101" in result.stdout
    [line] = result.stderr.splitlines()
    assert line.startswith("memlint: warning: ") and "pyproject.toml: not valid TOML" in line
    assert line.endswith("it has no [tool.memlint], so it is skipped")


def test_findings_sharing_one_edit_are_all_counted_as_fixed(tmp_path):
    two_uses = ("from torch.cuda.amp import GradScaler, autocast\n\n"
                "scaler = GradScaler()\nwith autocast():\n    pass\n")
    path = write(tmp_path, "train.py", two_uses)
    result = memlint(tmp_path, "--select", "MEM402", "train.py")
    assert "Found 2 errors." in result.stdout and "[*] 2 fixable" in result.stdout
    assert "Would fix 2 errors (0 remaining)." in memlint(tmp_path, "--select", "MEM402", "--diff", "train.py").stderr
    result = memlint(tmp_path, "--select", "MEM402", "--fix", "train.py")
    assert "Found 2 errors (2 fixed, 0 remaining)." in result.stdout
    assert path.read_text().startswith("from torch.amp import GradScaler, autocast\n")


def test_rules_and_explain(tmp_path):
    result = memlint(tmp_path, "rules")
    assert result.returncode == 0
    assert "| MEM101 | tensor-alloc-in-loop | opt-in | safe | peak-lower |" in result.stdout
    result = memlint(tmp_path, "explain", "mem101")
    assert result.returncode == 0
    assert result.stdout.startswith("# MEM101 tensor-alloc-in-loop")
    assert "## Why is this bad?" in result.stdout and "## Not reported (look-alikes)" in result.stdout
    result = memlint(tmp_path, "explain", "MEM999")
    assert result.returncode == 2 and "unknown rule code" in result.stderr


def test_usage_error_exits_two(tmp_path):
    result = memlint(tmp_path, "--output-format", "xml", ".")
    assert result.returncode == 2


def test_output_on_a_full_device_is_one_error_and_exit_2(tmp_path):
    write(tmp_path, "train.py", BAD)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", "memlint", *with_opt_in(["train.py"])], cwd=tmp_path,
                                env=env, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr == "memlint: error: cannot write the output: no space left on device\n"


def test_output_into_a_closed_pipe_is_one_error_and_exit_2(tmp_path):
    write(tmp_path, "train.py", BAD)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, "-m", "memlint", *with_opt_in(["train.py"])], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    process.stdout.close()  # as `memlint ... | head -0` does, before memlint writes a byte
    errors = process.stderr.read()
    assert process.wait(timeout=120) == 2
    assert errors == "memlint: error: cannot write the output: broken pipe\n"
