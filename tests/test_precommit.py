"""The pre-commit hooks through the real `pre-commit`, in a scratch git repository whose
`.pre-commit-config.yaml` points at this repository: pre-commit clones it at a commit, builds
its own virtualenv and installs memlint there, as it does for a user.

The hook repository is this checkout at HEAD when the work tree is clean (as in CI), else a
scratch repository holding one commit of the work tree as it is (tracked and untracked files
that git does not ignore), so the hooks tested are the ones in the tree.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Tuple

import pytest

REPO = Path(__file__).resolve().parent.parent
ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "memlint tests", "GIT_AUTHOR_EMAIL": "tests@memlint.invalid",
    "GIT_COMMITTER_NAME": "memlint tests", "GIT_COMMITTER_EMAIL": "tests@memlint.invalid",
    "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
}
BAD = ("import torch\n\nmodel = torch.nn.Linear(64, 64)\n"
       "for step in range(10):\n    noise = torch.randn(1024, 1024)\n    out = model(noise).sum()\n")
CONFIG = '[tool.memlint]\nextend-select = ["MEM101"]\n'  # BAD shows MEM101, an opt-in rule
FIXED = ("import torch\n\nmodel = torch.nn.Linear(64, 64)\nnoise = torch.empty(1024, 1024)\n"
         "for step in range(10):\n    noise.normal_()\n    out = model(noise).sum()\n")


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True,
                          text=True).stdout.strip()


def _checkout() -> Path:
    """This repository's top folder, or a skip when it is not a git checkout."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    try:
        top = Path(git(REPO, "rev-parse", "--show-toplevel")).resolve()
    except subprocess.CalledProcessError:
        pytest.skip("not a git checkout: pre-commit needs a repository and a commit to clone")
    if top != REPO:
        pytest.skip(f"memlint is not the top of its git checkout ({top})")
    return top


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory) -> Tuple[str, str]:
    """(repository, rev) for `.pre-commit-config.yaml`."""
    checkout = _checkout()
    if not git(checkout, "status", "--porcelain"):
        return str(checkout), git(checkout, "rev-parse", "HEAD")
    snapshot = tmp_path_factory.mktemp("memlint-snapshot")
    listed = git(checkout, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for name in filter(None, listed.split("\0")):
        source = checkout / name
        if source.is_file() and not source.is_symlink():
            (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, snapshot / name)
    git(snapshot, "init", "-q")
    git(snapshot, "add", "-A")
    git(snapshot, "commit", "-q", "-m", "the work tree of memlint, for the pre-commit tests")
    return str(snapshot), git(snapshot, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def pre_commit_home(tmp_path_factory) -> Path:
    """One cache for the module: pre-commit builds the hook's virtualenv once."""
    return tmp_path_factory.mktemp("pre-commit-home")


@pytest.fixture
def user_repo(tmp_path, hook_repo) -> Path:
    repository, rev = hook_repo
    git(tmp_path, "init", "-q")
    (tmp_path / ".pre-commit-config.yaml").write_text(
        f"repos:\n- repo: {json.dumps(repository)}\n  rev: {rev}\n"
        "  hooks:\n  - id: memlint\n  - id: memlint-fix\n", encoding="utf-8")
    return tmp_path


def pre_commit(cwd: Path, home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**ENV, "PRE_COMMIT_HOME": str(home)}
    result = subprocess.run([sys.executable, "-m", "pre_commit", *args], cwd=cwd, env=env,
                            capture_output=True, text=True, timeout=600)
    assert "An unexpected error has occurred" not in result.stdout + result.stderr, result.stdout
    return result


def _notebook(source: str) -> str:
    cell = {"cell_type": "code", "execution_count": 1, "metadata": {}, "outputs": [],
            "source": source.splitlines(keepends=True)}
    return json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1) + "\n"


def test_lint_fails_fix_rewrites_and_the_next_run_passes(user_repo, pre_commit_home):
    train, study = user_repo / "train.py", user_repo / "study.ipynb"
    train.write_text(BAD, encoding="utf-8")
    study.write_text(_notebook(BAD), encoding="utf-8")
    (user_repo / "legacy").mkdir()
    (user_repo / "legacy" / "old.py").write_text(BAD, encoding="utf-8")  # excluded by the config
    (user_repo / "pyproject.toml").write_text(CONFIG + 'exclude = ["legacy/"]\n', encoding="utf-8")
    git(user_repo, "add", "-A")

    lint = pre_commit(user_repo, pre_commit_home, "run", "memlint", "--all-files")
    assert lint.returncode == 1, lint.stdout + lint.stderr
    assert "train.py:5:5: MEM101" in lint.stdout and "study.ipynb:cell 1:5:5: MEM101" in lint.stdout
    assert "old.py" not in lint.stdout  # pre-commit names it; `exclude` still holds
    assert train.read_text(encoding="utf-8") == BAD  # the lint hook changes nothing

    fix = pre_commit(user_repo, pre_commit_home, "run", "memlint-fix", "--all-files")
    assert fix.returncode == 1  # pre-commit fails a hook that modified files
    assert "files were modified by this hook" in fix.stdout
    assert train.read_text(encoding="utf-8") == FIXED
    assert study.read_text(encoding="utf-8") == _notebook(FIXED)
    assert (user_repo / "legacy" / "old.py").read_text(encoding="utf-8") == BAD

    again = pre_commit(user_repo, pre_commit_home, "run", "--all-files")
    assert again.returncode == 0, again.stdout
    assert again.stdout.count("Passed") == 2


def test_a_commit_without_python_files_passes_and_one_with_a_bad_file_does_not(user_repo, pre_commit_home):
    (user_repo / "train.py").write_text(BAD, encoding="utf-8")
    (user_repo / "pyproject.toml").write_text(CONFIG, encoding="utf-8")
    git(user_repo, "add", "train.py", "pyproject.toml")
    git(user_repo, "commit", "-q", "--no-verify", "-m", "a bad file already committed")
    assert pre_commit(user_repo, pre_commit_home, "install").returncode == 0

    (user_repo / "README.md").write_text("# notes\n", encoding="utf-8")
    git(user_repo, "add", "README.md")
    commit = subprocess.run(["git", "commit", "-m", "docs only"], cwd=user_repo, capture_output=True,
                            text=True, env={**ENV, "PRE_COMMIT_HOME": str(pre_commit_home)}, timeout=600)
    assert commit.returncode == 0, commit.stdout + commit.stderr
    assert "(no files to check)Skipped" in commit.stdout + commit.stderr

    (user_repo / "train.py").write_text(BAD + "\n", encoding="utf-8")
    git(user_repo, "add", "train.py")
    commit = subprocess.run(["git", "commit", "-m", "touch the bad file"], cwd=user_repo, capture_output=True,
                            text=True, env={**ENV, "PRE_COMMIT_HOME": str(pre_commit_home)}, timeout=600)
    assert commit.returncode == 1
    assert "train.py:5:5: MEM101" in commit.stdout + commit.stderr


def test_one_run_at_the_root_of_a_monorepo_uses_each_project_s_configuration(user_repo, pre_commit_home):
    """pre-commit names files from the repository's root, in batches; memlint runs once for all
    of them (`require_serial`: one summary, one pool of processes), and each file is linted
    with the configuration of its own project."""
    (user_repo / "a").mkdir()
    (user_repo / "b").mkdir()
    (user_repo / "a" / "pyproject.toml").write_text(CONFIG, encoding="utf-8")
    for index in range(8):
        for project in ("a", "b"):
            (user_repo / project / f"train_{index}.py").write_text(BAD, encoding="utf-8")
    git(user_repo, "add", "-A")
    lint = pre_commit(user_repo, pre_commit_home, "run", "memlint", "--all-files")
    assert lint.returncode == 1, lint.stdout + lint.stderr
    assert [line for line in lint.stdout.splitlines() if line.startswith("Found ")] == ["Found 8 errors."]
    assert sorted(line.split(":")[0] for line in lint.stdout.splitlines() if ": MEM101" in line) == [
        f"a/train_{index}.py" for index in range(8)]
