"""Inputs a user hits by accident: configuration nested too deep, folders that hold no Python,
folder names that are also commands, empty selections, unknown codes in `# noqa`, a `.gitignore`
that cannot be read. Each ends in one clear line and the right exit code, never a traceback
and never a silent pass."""

from __future__ import annotations

import os

import pytest

from test_cli import BAD, memlint, write
from test_files_and_writes import unprivileged  # noqa: F401  (a fixture)

DEEP = "[" * 5000


# -- configuration nested too deep ---------------------------------------------------------
def test_a_memlint_table_nested_too_deep_is_a_one_line_error(tmp_path):
    write(tmp_path, "pyproject.toml", f"[tool.memlint]\nselect = {DEEP}\n")
    write(tmp_path, "train.py", BAD)
    result = memlint(tmp_path, "train.py")
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("memlint: error: ") and "pyproject.toml: cannot read: nested too deep" in line


def test_a_pyproject_of_another_tool_nested_too_deep_is_skipped_with_a_warning(tmp_path):
    # it names torch, so the target-torch reader opens it too
    write(tmp_path, "pyproject.toml", f'[project]\ndependencies = ["torch>=2.1"]\nx = {DEEP}\n')
    write(tmp_path, "train.py", BAD)
    result = memlint(tmp_path, "train.py")
    assert result.returncode == 1, result.stderr
    assert "train.py:4:5: MEM101" in result.stdout
    [line] = result.stderr.splitlines()
    assert line.startswith("memlint: warning: ") and "nested too deep" in line


def test_a_config_file_named_with_config_nested_too_deep_is_a_one_line_error(tmp_path):
    write(tmp_path, "settings.toml", f"select = {DEEP}\n")
    write(tmp_path, "train.py", BAD)
    result = memlint(tmp_path, "--config", "settings.toml", "train.py")
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1 and "nested too deep" in result.stderr


# -- paths that hold no Python file ---------------------------------------------------------
def test_an_empty_folder_named_on_the_command_line_is_an_error(tmp_path):
    (tmp_path / "empty").mkdir()
    write(tmp_path, "train.py", BAD)
    result = memlint(tmp_path, "empty", "train.py")
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["empty: error: no Python file found"]
    assert "train.py:4:5: MEM101" in result.stdout


def test_a_folder_all_gitignored_by_a_parent_is_an_error_not_a_pass(tmp_path):
    (tmp_path / ".git").mkdir()
    write(tmp_path, ".gitignore", "generated/\n*.py\n")
    write(tmp_path, "generated/train.py", BAD)
    write(tmp_path, "src/train.py", BAD)
    result = memlint(tmp_path / "src", ".")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        ".: error: no Python file found (all are ignored by .gitignore or `exclude`, or vendored)"]
    assert "All checks passed!" not in result.stdout


def test_no_path_given_and_nothing_to_lint_says_so_and_passes(tmp_path):
    result = memlint(tmp_path)
    assert result.returncode == 0
    assert result.stderr.splitlines() == ["memlint: warning: no Python file found under ."]
    assert "All checks passed!" not in result.stdout


def test_a_file_pre_commit_names_that_exclude_skips_is_no_error(tmp_path):
    write(tmp_path, "pyproject.toml", '[tool.memlint]\nexclude = ["legacy/"]\n')
    write(tmp_path, "legacy/old.py", BAD)
    result = memlint(tmp_path, "--force-exclude", "legacy/old.py")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


# -- a folder named like a command ------------------------------------------------------------
@pytest.mark.parametrize("name", ["rules", "explain", "verify", "check"])
def test_a_path_that_exists_wins_over_a_command_of_its_name(tmp_path, name):
    write(tmp_path, f"{name}/train.py", BAD)
    result = memlint(tmp_path, name, "--extend-select", "MEM101", opt_in=False)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{name}/train.py:4:5: MEM101" in result.stdout
    checked = memlint(tmp_path, "check", name)
    assert checked.returncode == 1 and f"{name}/train.py:4:5: MEM101" in checked.stdout


def test_commands_work_where_no_path_has_their_name(tmp_path):
    result = memlint(tmp_path, "rules")
    assert result.returncode == 0 and "| MEM101 | tensor-alloc-in-loop |" in result.stdout


# -- the summary after --fix with a failing path ----------------------------------------------
def test_the_summary_keeps_the_fixed_count_when_a_path_fails(tmp_path):
    write(tmp_path, "a.py", BAD)
    write(tmp_path, "broken.py", "def broken(:\n")
    result = memlint(tmp_path, "--fix", "a.py", "broken.py")
    assert result.returncode == 2
    assert result.stdout.splitlines()[-1] == "Found 1 error (1 fixed, 0 remaining); 1 path could not be checked."


# -- selections, codes and ignore files ------------------------------------------------------
@pytest.mark.parametrize("value", [",", "", " , "])
def test_an_empty_selection_is_a_usage_error(tmp_path, value):
    write(tmp_path, "train.py", BAD)
    result = memlint(tmp_path, "--select", value, "train.py")
    assert result.returncode == 2
    assert "--select: no rule code given" in result.stderr


def test_lowercase_codes_in_the_configuration_are_accepted_as_on_the_command_line(tmp_path):
    write(tmp_path, "pyproject.toml", '[tool.memlint]\nselect = ["mem101"]\nper-file-ignores = {"t_*.py" = ["mem1"]}\n')
    write(tmp_path, "train.py", BAD)
    write(tmp_path, "t_x.py", BAD)
    result = memlint(tmp_path, ".", opt_in=False)
    assert result.returncode == 1, result.stderr
    assert "train.py:4:5: MEM101" in result.stdout and "t_x.py" not in result.stdout


def test_noqa_naming_an_unknown_memlint_code_is_a_warning(tmp_path):
    source = BAD.replace("torch.randn(n, n)", "torch.randn(n, n)  # noqa: MEM999, E501")
    write(tmp_path, "train.py", source)
    result = memlint(tmp_path, "train.py")
    assert result.returncode == 1  # MEM999 hides nothing: MEM101 is still reported
    assert "train.py:4:5: MEM101" in result.stdout
    assert result.stderr.splitlines() == ["train.py:4: warning: `# noqa` names MEM999, which is no memlint rule"]
    again = memlint(tmp_path, "train.py")  # from the cache: the warning stays
    assert again.stderr == result.stderr


def test_a_gitignore_that_is_not_a_file_is_a_warning(tmp_path):
    (tmp_path / "src" / ".gitignore").mkdir(parents=True)
    write(tmp_path, "src/train.py", BAD)
    result = memlint(tmp_path, "src")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "src/.gitignore: warning: cannot read: is a directory; its patterns are not applied"]


def test_an_unreadable_gitignore_is_a_warning(unprivileged):  # noqa: F811
    top = unprivileged.folder
    ignore = write(top, "src/.gitignore", "scratch.py\n")
    train = write(top, "src/train.py", BAD)
    unprivileged.own(top / "src", ignore, train)
    ignore.chmod(0)
    result = unprivileged.memlint("src")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "src/.gitignore: warning: cannot read: permission denied; its patterns are not applied"]


def test_out_of_memory_while_compiling_says_why(tmp_path, monkeypatch):
    from memlint import engine

    def no_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(engine, "compile", no_memory, raising=False)
    with pytest.raises(engine.SourceError) as error:
        engine.compiles("x = 1\n", "x.py")
    assert str(error.value).startswith(f"cannot parse as {engine.SYNTAX}: out of memory")
    assert os.linesep not in str(error.value)
