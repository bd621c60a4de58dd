"""Configuration per file, as ruff finds it: each file uses the closest `.memlint.toml`,
`memlint.toml` or `pyproject.toml` with [tool.memlint] above it, wherever memlint runs from
(pre-commit at the root of a monorepo, a shell in a sibling folder); `--config` names one
file for all; `--show-settings FILE` says what applies to FILE and where it came from."""

from __future__ import annotations

import os

from test_cli import BAD, memlint, write

OWN = '[tool.memlint]\nextend-select = ["MEM101"]\nexclude = ["gen/"]\nper-file-ignores = {"tests/*.py" = ["MEM101"]}\n'


def reported(result) -> set:
    return {line.split(":")[0] for line in result.stdout.splitlines() if ": MEM" in line}


def monorepo(root):
    (root / ".git").mkdir()
    write(root, "pyproject.toml", '[project]\nname = "mono"\n')  # no [tool.memlint]: not a configuration
    write(root, "a/pyproject.toml", OWN)
    for name in ("a/train.py", "a/gen/train.py", "a/tests/test_x.py", "b/train.py"):
        write(root, name, BAD)


def test_each_file_uses_the_closest_configuration_above_it(tmp_path):
    monorepo(tmp_path)
    result = memlint(tmp_path, ".", opt_in=False)
    assert result.returncode == 1, result.stderr
    assert reported(result) == {os.path.join("a", "train.py")}  # b/ has only the defaults: MEM101 is opt-in


def test_a_project_configuration_applies_from_any_folder(tmp_path):
    monorepo(tmp_path)
    from_sibling = memlint(tmp_path / "b", "../a", opt_in=False)
    assert reported(from_sibling) == {"../a/train.py"}  # exclude and per-file-ignores of a/ hold
    named = memlint(tmp_path, "--force-exclude", "a/train.py", "a/gen/train.py", "a/tests/test_x.py",
                    opt_in=False)  # as pre-commit runs it, at the root
    assert reported(named) == {"a/train.py"}


def test_command_line_options_apply_on_top_of_every_configuration(tmp_path):
    monorepo(tmp_path)
    assert reported(memlint(tmp_path, "--ignore", "MEM101", ".", opt_in=False)) == set()
    both = memlint(tmp_path, "--extend-select", "MEM101", ".", opt_in=False)
    assert reported(both) == {os.path.join("a", "train.py"), os.path.join("b", "train.py")}


def test_memlint_toml_files_have_top_level_keys_and_come_first(tmp_path):
    write(tmp_path, "pyproject.toml", '[tool.memlint]\nselect = ["MEM2"]\n')
    write(tmp_path, "memlint.toml", 'extend-select = ["MEM101"]\n')
    write(tmp_path, "train.py", BAD)
    assert memlint(tmp_path, "train.py", opt_in=False).returncode == 1  # memlint.toml, not pyproject.toml
    write(tmp_path, ".memlint.toml", 'ignore = ["MEM101"]\n')
    assert memlint(tmp_path, "train.py", opt_in=False).returncode == 0  # .memlint.toml before memlint.toml


def test_config_names_a_memlint_toml_with_top_level_keys(tmp_path):
    write(tmp_path, "ci/strict.toml", 'extend-select = ["MEM101"]\nper-file-ignores = {"skip.py" = ["MEM1"]}\n')
    write(tmp_path, "train.py", BAD)
    write(tmp_path, "ci/skip.py", BAD)
    result = memlint(tmp_path, "--config", "ci/strict.toml", "train.py", "ci/skip.py", opt_in=False)
    assert result.returncode == 1, result.stderr
    assert reported(result) == {"train.py"}  # globs are relative to the file's folder


def test_config_overrides_every_file_s_own_configuration(tmp_path):
    monorepo(tmp_path)
    write(tmp_path, "plain.toml", "")
    result = memlint(tmp_path, "--config", "plain.toml", ".", opt_in=False)
    assert result.returncode == 0 and reported(result) == set()


def test_config_naming_a_pyproject_without_a_memlint_table_is_an_error(tmp_path):
    write(tmp_path, "pyproject.toml", '[project]\nname = "x"\n')
    write(tmp_path, "train.py", BAD)
    result = memlint(tmp_path, "--config", "pyproject.toml", "train.py")
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["memlint: error: pyproject.toml: no [tool.memlint] table"]


def test_a_bad_configuration_below_the_working_folder_is_a_one_line_error(tmp_path):
    write(tmp_path, "a/memlint.toml", 'selct = ["MEM1"]\n')
    write(tmp_path, "a/train.py", BAD)
    result = memlint(tmp_path, ".")
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("memlint: error: ") and "memlint.toml: unknown key `selct`" in line


def test_a_warm_run_gives_what_the_cold_one_gave(tmp_path):
    monorepo(tmp_path)
    cold = memlint(tmp_path, ".", opt_in=False)
    warm = memlint(tmp_path, ".", opt_in=False)
    assert (warm.stdout, warm.returncode) == (cold.stdout, cold.returncode)


def test_show_settings_says_what_applies_to_a_file_and_where_it_came_from(tmp_path):
    monorepo(tmp_path)
    result = memlint(tmp_path / "b", "--show-settings", "../a/tests/test_x.py", opt_in=False)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "Settings for ../a/tests/test_x.py"
    assert f"configuration: {tmp_path / 'a' / 'pyproject.toml'} [tool.memlint]" in lines
    assert 'extend-select = ["MEM101"]' in lines
    assert 'per-file-ignores = {"tests/*.py" = ["MEM101"]}' in lines
    rules = next(line for line in lines if line.startswith("rules = "))
    assert "MEM201" in rules and "MEM101" not in rules  # ignored for this file
    assert "excluded = false" in lines
    other = memlint(tmp_path, "--show-settings", "b/train.py", "--select", "MEM2", opt_in=False)
    assert "configuration: none (defaults)" in other.stdout.splitlines()
    assert "command line: --select MEM2" in other.stdout.splitlines()


def test_a_fresh_configuration_sees_a_folder_link_moved_since_the_last(tmp_path):
    """Folders are resolved once per run, and afresh for each new set of configurations (the
    editor's server makes one per lint): a link moved in between leads where it now points."""
    from memlint.config import Configurations
    from memlint.rules import registry

    write(tmp_path, "a/pyproject.toml", '[tool.memlint]\nexclude = ["gen.py"]\n')
    write(tmp_path, "a/gen.py", BAD)
    write(tmp_path, "b/gen.py", BAD)
    link = tmp_path / "current"
    link.symlink_to(tmp_path / "a", target_is_directory=True)
    assert Configurations(tmp_path, registry()).is_excluded(link / "gen.py")
    link.unlink()
    link.symlink_to(tmp_path / "b", target_is_directory=True)
    assert not Configurations(tmp_path, registry()).is_excluded(link / "gen.py")


def test_exclude_patterns_match_as_gitignore_does_without_deprecated_pattern_kinds(tmp_path):
    """`exclude` and `per-file-ignores` use gitignore's rules (pathspec's GitIgnoreSpec), not the
    pattern kind newer pathspec releases deprecate (and will remove)."""
    import warnings

    from memlint.config import Config

    config = Config(root=tmp_path, exclude=["gen/", "!gen/keep.py"], per_file_ignores={"tests/*.py": ["MEM101"]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert config.is_excluded(tmp_path / "gen" / "train.py")
        assert not config.is_excluded(tmp_path / "train.py")
        assert config.ignored_codes(tmp_path / "tests" / "test_x.py") == ["MEM101"]
