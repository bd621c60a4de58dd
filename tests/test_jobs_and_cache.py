"""Parallel runs and the result cache: the same answers as a plain run, only sooner."""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import os
import pickle
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Callable, List, Optional, Tuple

import pytest

import memlint.engine as engine
import memlint.jobs as jobs
import memlint.run as run_module
from memlint.cache import MAX_BUNDLE_BYTES, Entry, file_key, open_cache, settings_digest, text_digest
from memlint.config import Config, Selection
from memlint.findings import Finding, Range
from memlint.rules import registry
from memlint.run import Options, run
from memlint.torch_target import TorchVersion

from test_cli import BAD, CLEAN, MOVED, REPO, memlint, write

AMP = textwrap.dedent("""\
    import torch
    from torch.cuda.amp import GradScaler

    def train(model, loader, optimizer):
        scaler = GradScaler()
        for x, y in loader:
            with torch.autocast("cuda"):
                loss = model(x).sum()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
""")


def _tree(top: Path) -> None:
    write(top, "a/train.py", BAD)
    write(top, "a/moved.py", MOVED)
    write(top, "b/amp.py", AMP)
    write(top, "b/clean.py", CLEAN)
    write(top, "b/broken.py", "import torch\ndef f(:\n")
    write(top, "c/plain.py", "print('no tensors here')\n")
    for index in range(6):
        write(top, f"c/train_{index}.py", BAD.replace("64", str(64 + index)))


@pytest.mark.parametrize("output", ["text", "json"])
def test_jobs_give_what_one_process_gives_in_the_same_order(tmp_path, output):
    _tree(tmp_path)
    args = ["--select", "ALL", "--no-cache", "--output-format", output, "."]
    one = memlint(tmp_path, "-j", "1", *args)
    two = memlint(tmp_path, "-j", "3", *args)
    assert one.returncode == two.returncode == 2  # broken.py
    assert (two.stdout, two.stderr) == (one.stdout, one.stderr)
    if output == "json":
        files = [item["filename"] for item in json.loads(one.stdout)]
        assert files == sorted(files) and len(set(files)) == 9  # discovery order: folders walked sorted


def test_a_bad_jobs_value_is_a_usage_error(tmp_path):
    result = memlint(tmp_path, "-j", "0", ".")
    assert result.returncode == 2
    assert "not a number of processes" in result.stderr


def _lint(top: Path, cache_dir: Optional[Path], jobs: int = 1, notices: Optional[List[str]] = None,
          **options):
    config = Config(root=top, selection=Selection(extend_select=["MEM101"]))  # the opt-in rule BAD shows
    cache = open_cache(config, cache_dir) if cache_dir is not None else None
    options = {"memory_budget": 0, **options}  # with one job, no budget: linted here, where compiles are counted
    outcomes = run([str(top)], config, registry(), Options(jobs=jobs, cache=cache, **options), notices)
    return [(o.display, [(f.code, f.line, f.column, f.message) for f in o.findings], o.error, o.fix_diffs)
            for o in outcomes]


def test_processes_that_cannot_start_leave_the_work_to_this_one(tmp_path, monkeypatch):
    _tree(tmp_path)
    expected = _lint(tmp_path, None)

    def no_processes(*args, **kwargs):
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(jobs._Worker, "__init__", no_processes)
    notices: List[str] = []
    assert _lint(tmp_path, None, jobs=4, notices=notices) == expected
    assert len(notices) == 1 and "cannot start worker processes" in notices[0]


def _work(item: int) -> int:
    """A stand-in for linting one file: 1 never ends in Python, 2 never ends in C, 3 dies."""
    if item == 1:
        while True:
            pass
    if item == 2:
        sum(range(10 ** 15))  # one C call: no signal handler runs until it returns
    if item == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return item * 10


def _failed(item: int, over_budget: bool, why: str) -> str:
    return f"{item}: {'over budget' if over_budget else why}"


@pytest.mark.skipif(not jobs.budgets_enforced(), reason="no CPU-time limits on this platform")
def test_an_item_over_its_cpu_budget_is_stopped_even_in_native_code_and_the_rest_go_on():
    results = jobs.map_in_order(_work, [0, 1, 4, 2, 3, 5], jobs=2, size=lambda item: item,
                                failed=_failed, budget=1)
    assert results == [0, "1: over budget", 40, "2: over budget",
                       "3: the process linting it was killed (SIGKILL)", 50]


def _frozen_here(item: int) -> int:
    """A stand-in for linting one file: how many objects this worker holds out of the cycle
    collector when it starts the item; 3 dies."""
    if item == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return gc.get_freeze_count()


@pytest.mark.skipif(not jobs.budgets_enforced(), reason="no CPU-time limits on this platform")
def test_results_are_out_of_the_collectors_reach_while_taken_in_and_a_worker_forked_meanwhile_thaws_them():
    """The run's process keeps each result a worker sends back (findings, a module's summary)
    until the end: frozen as it comes in, so that no collection traverses them again, and
    thawed when the pool is done. The worker that replaces one that died is forked while
    results are frozen: it thaws them, else its own freezing of each tree would stand aside."""
    gc.collect()
    assert gc.get_freeze_count() == 0
    frozen_here: List[int] = []
    results = jobs.map_in_order(_frozen_here, [0, 3, 4], jobs=1, size=lambda item: 0, failed=_failed, budget=100,
                                done=lambda index, result: frozen_here.append(gc.get_freeze_count()))
    assert results == [0, "3: the process linting it was killed (SIGKILL)", 0]
    assert frozen_here[0] > 0 and frozen_here[2] > 0
    assert gc.get_freeze_count() == 0 and gc.isenabled()


def _comes_true(condition: Callable[[], bool], seconds: float = 5) -> bool:
    """Whether `condition()` holds within `seconds` (asked every hundredth of a second)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _handed_the_next_meanwhile(item: Tuple[str, int, int]) -> bool:
    """A stand-in for linting one file: whether the parent hands out the item after it (its
    marker file appears) while this one runs; the last has none."""
    folder, index, last = item
    return index == last or _comes_true(Path(folder, f"given-{index + 1}").exists)


@pytest.mark.skipif(not jobs.budgets_enforced() or jobs._context().get_start_method() != "fork",
                    reason="no CPU-time limits, or no forked workers, on this platform")
def test_a_forked_worker_is_handed_its_next_item_while_it_runs_one(tmp_path, monkeypatch):
    """A worker given one item at a time sleeps on the parent between items, and may wake on
    another core, its caches cold (jobs.AHEAD): the next item waits in its pipe instead. (A
    worker that dies holding items ahead has them linted by the next one: the test above.)"""
    give = jobs._Worker.give

    def marked(worker: jobs._Worker, index: int, item: object) -> None:
        give(worker, index, item)
        (tmp_path / f"given-{index}").touch()

    monkeypatch.setattr(jobs._Worker, "give", marked)
    items = [(str(tmp_path), index, 3) for index in range(4)]
    assert jobs.map_in_order(_handed_the_next_meanwhile, items, jobs=1, size=lambda item: -item[1],
                             failed=_failed, budget=100) == [True] * 4


def _waits_for_the_others(item: Tuple[str, int]) -> bool:
    """A stand-in for linting files: 0 is slow, and says whether the others were all done
    while it ran; the others leave a marker."""
    folder, index = item
    if index:
        Path(folder, f"done-{index}").touch()
        return True
    return _comes_true(lambda: all(Path(folder, f"done-{other}").exists() for other in (1, 2, 3)))


@pytest.mark.skipif(not jobs.budgets_enforced(), reason="no CPU-time limits on this platform")
def test_with_several_workers_no_item_waits_behind_a_slow_one(tmp_path):
    """Handed ahead, an item would wait in the pipe of a worker stuck on a slow file while
    another worker sat idle: with several workers, each is handed one item at a time."""
    items = [(str(tmp_path), index) for index in range(4)]
    assert jobs.map_in_order(_waits_for_the_others, items, jobs=2, size=lambda item: -item[1],
                             failed=_failed, budget=100) == [True] * 4


_THIS_PROCESS = os.getpid()


def _dies_in_a_worker(item: int) -> object:
    """A stand-in for linting one file: 3 ends the worker running it."""
    if item == 3:
        if os.getpid() != _THIS_PROCESS:
            os.kill(os.getpid(), signal.SIGKILL)
        return "linted in the test's own process"
    return item * 10


@pytest.mark.skipif(not jobs.budgets_enforced() or jobs._context().get_start_method() != "fork",
                    reason="no CPU-time limits, or no forked workers, on this platform")
def test_an_item_handed_ahead_to_a_worker_that_died_meanwhile_goes_to_the_next(monkeypatch):
    """The parent hands a worker its next item while it runs one; if that one ended the
    worker, the pipe is broken by the time the next is sent. The items it held go to the
    worker started in its place, not to the parent's own process (a worker's death is no
    reason to lint there, without budgets)."""
    give = jobs._Worker.give

    def late(worker: jobs._Worker, index: int, item: object) -> None:
        if worker.held:  # (an item ahead: sent once the one running has surely ended it)
            time.sleep(0.2)
        give(worker, index, item)

    monkeypatch.setattr(jobs._Worker, "give", late)
    notices: List[str] = []
    results = jobs.map_in_order(_dies_in_a_worker, [0, 3, 1, 2], jobs=1, size=lambda item: 0, failed=_failed,
                                budget=100, notices=notices)
    assert results == [0, "3: the process linting it was killed (SIGKILL)", 10, 20]
    assert notices == []


@pytest.mark.skipif(not jobs.budgets_enforced(), reason="no CPU-time limits on this platform")
def test_a_file_over_the_time_budget_is_a_warning_and_the_others_are_linted(tmp_path, monkeypatch):
    _tree(tmp_path)
    expected = _lint(tmp_path, None)
    write(tmp_path, "c/slow.py", BAD)
    check = run_module.check

    def slow_on_one_file(source, path, rules, target_torch=None, timer=None, **options):
        while path.endswith("slow.py"):
            pass
        return check(source, path, rules, target_torch, timer, **options)

    monkeypatch.setattr(run_module, "check", slow_on_one_file)  # the workers fork with it
    config = Config(root=tmp_path, selection=Selection(extend_select=["MEM101"]))
    outcomes = run([str(tmp_path)], config, registry(), Options(jobs=1, file_timeout=1))
    [slow] = [o for o in outcomes if o.display.endswith("slow.py")]
    assert slow.warning == "not linted: it takes more than 1 s of CPU time (see --file-timeout)"
    assert slow.error is None and slow.findings == []
    rest = [(o.display, [(f.code, f.line, f.column, f.message) for f in o.findings], o.error, o.fix_diffs)
            for o in outcomes if o is not slow]
    assert rest == expected


@pytest.mark.parametrize("args,config,message", [
    (["--file-timeout", "-1"], "", "not a number of seconds"),
    ([], "file-timeout = \"5\"\n", "`file-timeout` must be a number of seconds"),
])
def test_a_bad_file_timeout_is_a_one_line_error(tmp_path, args, config, message):
    write(tmp_path, "pyproject.toml", "[tool.memlint]\n" + config)
    write(tmp_path, "train.py", BAD)
    result = memlint(tmp_path, *args, "train.py")
    assert result.returncode == 2
    assert message in result.stderr


class _Counting:
    """Counts what the engine compiles and parses (a warm run must do neither)."""

    def __init__(self, monkeypatch) -> None:
        self.compiled = self.parsed = 0
        compiles, parse = engine.compiles, engine.parse

        def counted_compiles(*args):
            self.compiled += 1
            return compiles(*args)

        def counted_parse(*args):
            self.parsed += 1
            return parse(*args)

        monkeypatch.setattr(engine, "compiles", counted_compiles)
        monkeypatch.setattr(engine, "parse", counted_parse)


def test_a_warm_run_reads_every_result_from_the_cache_and_parses_nothing(tmp_path, monkeypatch):
    _tree(tmp_path / "src")
    cache = tmp_path / "cache"
    counting = _Counting(monkeypatch)
    cold = _lint(tmp_path / "src", cache, fix_diffs=True)
    assert counting.compiled == 12 and counting.parsed > 0
    counting.compiled = counting.parsed = 0
    warm = _lint(tmp_path / "src", cache, fix_diffs=True)
    assert (counting.compiled, counting.parsed) == (0, 0)
    assert warm == cold
    assert any(diffs for _, _, _, diffs in warm)  # fix diffs come back too

    write(tmp_path / "src", "a/train.py", BAD.replace("range(10)", "range(20)"))  # one file edited
    again = _lint(tmp_path / "src", cache, fix_diffs=True)
    assert counting.compiled == 1
    assert [o[:3] for o in again] == [o[:3] for o in cold]  # the edit kept every position
    assert "range(20)" in again[1][3][0]


def test_a_worker_sends_back_what_it_found_not_the_text_it_was_given(tmp_path):
    """The run has every file's text: a worker's outcome (pickled through a pipe, unpickled
    here) holds what the lint found, not a copy of the text it was given (three quarters of
    the bytes a run moved between its processes); the run caches it under the digest of the
    text it read (that a warm run finds it: the warm-run test above)."""
    marker = "a_name_found_in_no_finding_" * 40
    path = write(tmp_path, "train.py", BAD + f"\n{marker} = 1\n")
    source = run_module.read(path)
    task = run_module._Task(path, "train.py", tuple(registry().values()), source, Options(), None)
    outcome = run_module._lint(task)
    assert outcome.findings and outcome.entry is not None
    assert marker.encode() not in pickle.dumps(outcome)


def test_the_key_covers_every_config_field_the_rules_and_the_text(tmp_path):
    base = Config(root=tmp_path)
    assert settings_digest(base) == settings_digest(Config(root=tmp_path))
    assert settings_digest(base) != settings_digest(Config(root=tmp_path, selection=Selection(select=["ALL"])))

    @dataclasses.dataclass
    class Later(Config):  # a setting added after this test was written
        later_setting: str = "a"

    assert settings_digest(Later(root=tmp_path)) != settings_digest(Later(root=tmp_path, later_setting="b"))

    cache = open_cache(base, tmp_path / "cache")
    path = write(tmp_path, "train.py", BAD)
    rules = [registry()["MEM101"]]
    key = file_key("train.py", path, rules, TorchVersion(2, 1))
    finding = Finding("MEM101", rules[0].NAME, "kept", "", Range(4, 13, 4, 29), 4, cell=2)
    cache.put(key, text_digest(BAD), Entry([finding], notebook=True))
    cache.save()
    cache = open_cache(base, tmp_path / "cache")  # another run
    assert cache.get(key, text_digest(BAD), rules) == Entry([finding], notebook=True)
    assert cache.get(key, text_digest(BAD + "\n"), rules) is None  # another text
    assert cache.get(key, text_digest(BAD), [registry()["MEM201"]]) is None  # a finding of no rule that applies
    assert len({key, file_key("train.py", path, [*rules, registry()["MEM201"]], TorchVersion(2, 1)),  # other rules
                file_key("train.py", tmp_path / "other.py", rules, TorchVersion(2, 1)),
                file_key("tests/train.py", path, rules, TorchVersion(2, 1)),  # shown as a test module
                file_key("train.py", path, rules, TorchVersion(2, 6)),  # another declared torch
                file_key("train.py", path, rules, None)}) == 6


def _entries(cache: Path) -> List[Path]:
    """Every bundle of the cache: results and module summaries."""
    return sorted(cache.rglob("*.json"))


def _sealed(payload: bytes) -> bytes:
    """A bundle as memlint writes one: the SHA-256 of its JSON, a newline, the JSON."""
    return hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


def _payload(entry: Path) -> dict:
    """The JSON of a whole bundle (its checksum matches)."""
    digest, _, payload = entry.read_bytes().partition(b"\n")
    assert digest.decode() == hashlib.sha256(payload).hexdigest()
    return json.loads(payload)


def test_a_corrupt_record_or_bundle_is_a_miss_and_is_replaced(tmp_path, monkeypatch):
    _tree(tmp_path / "src")
    cache = tmp_path / "cache"
    cold = _lint(tmp_path / "src", cache)
    [results] = cache.rglob("results-*.json")
    [summaries] = cache.rglob("summaries-*.json")
    assert len(_payload(results)) == len(_payload(summaries)) == 12
    records = _payload(results)
    damaged = next(key for key, record in records.items() if record["findings"])
    records[damaged]["findings"] = [[1, 2]]
    results.write_bytes(_sealed(json.dumps(records).encode()))
    counting = _Counting(monkeypatch)
    assert _lint(tmp_path / "src", cache) == cold
    assert counting.compiled == 1  # that file alone is linted again
    assert _payload(results)[damaged]["findings"] != [[1, 2]]  # and its record replaced

    results.write_bytes(results.read_bytes()[:80])  # cut short: the whole bundle is a miss
    counting.compiled = 0
    assert _lint(tmp_path / "src", cache) == cold
    assert counting.compiled == 12
    assert len(_payload(results)) == 12  # rewritten whole

    records = _payload(summaries)
    [amp] = [key for key, record in records.items() if record["summary"]["name"] == "amp"]
    records[amp]["summary"] = {"name": 1}
    summaries.write_bytes(_sealed(json.dumps(records).encode()))
    write(tmp_path / "src", "c/plain.py", "print('no tensors here either')\n")  # another project: summaries read
    counting.compiled = 0
    assert _lint(tmp_path / "src", cache) == cold
    assert counting.compiled == 2  # the edited file, and the module whose summary was damaged


@pytest.mark.parametrize("damage", ["flipped bit", "deep nesting", "sealed deep nesting", "fifo", "huge"])
def test_a_damaged_entry_is_a_miss_never_a_result_a_crash_or_a_hang(tmp_path, damage):
    write(tmp_path, "train.py", BAD)
    write(tmp_path, "amp.py", AMP)
    args = ["--select", "ALL", "amp.py", "train.py"]
    fresh = {form: memlint(tmp_path, "--no-cache", *form, *args) for form in
             (("--statistics",), ("--output-format", "sarif"), ("--output-format", "json"))}
    memlint(tmp_path, *args)  # fills the cache
    entries = _entries(tmp_path / ".memlint_cache")
    assert len(entries) == 2  # the files' results and their modules' summaries
    for entry in entries:
        data = entry.read_bytes()
        if damage == "flipped bit":  # in a result, MEM402 becomes MUM402: one bit, in the code
            at = data.find(b'"MEM') + 2 if b'"MEM' in data else len(data) - 3
            entry.write_bytes(data[:at] + bytes([data[at] ^ 0x10]) + data[at + 1:])
        elif damage == "deep nesting":
            entry.write_bytes(b"[" * 100_000 + b"]" * 100_000)
        elif damage == "sealed deep nesting":  # with a checksum that matches
            entry.write_bytes(_sealed(b"[" * 100_000 + b"]" * 100_000))
        elif damage == "fifo":
            entry.unlink()
            os.mkfifo(entry)  # reading it would wait for a writer forever
        else:  # larger than any bundle memlint reads (sparse: it takes no room)
            os.truncate(entry, MAX_BUNDLE_BYTES + 1)
    for form, expected in fresh.items():
        result = memlint(tmp_path, *form, *args)  # memlint() fails on a traceback, and gives up after 120 s
        assert (result.returncode, result.stdout, result.stderr) == \
            (expected.returncode, expected.stdout, expected.stderr)
    for entry in _entries(tmp_path / ".memlint_cache"):  # replaced by good ones
        assert stat.S_ISREG(entry.stat().st_mode) and entry.stat().st_size < 2**20


def test_cache_dir_keeps_folders_that_only_look_like_old_cache_versions(tmp_path):
    lookalike = write(tmp_path, "shared/0.9-0123456789abcdef/results.txt", "the user's\n")
    write(tmp_path, "train.py", BAD)
    memlint(tmp_path, "--cache-dir", "shared", "train.py")
    assert lookalike.read_text() == "the user's\n"
    [ours] = [folder for folder in (tmp_path / "shared").iterdir() if folder.is_dir() and folder != lookalike.parent]
    old = tmp_path / "shared" / "0.9-fedcba9876543210"
    shutil.copytree(ours, old)  # what an older memlint left: marked as memlint's own, so it goes
    write(tmp_path, "train.py", BAD + "\n")
    shutil.rmtree(ours)  # as if this were the first run of a new version
    memlint(tmp_path, "--cache-dir", "shared", "train.py")
    assert not old.exists() and lookalike.read_text() == "the user's\n"


def test_fix_still_fixes_a_file_whose_findings_came_from_the_cache(tmp_path):
    path = write(tmp_path, "train.py", BAD)
    assert memlint(tmp_path, "train.py").returncode == 1
    result = memlint(tmp_path, "--fix", "train.py")
    assert result.returncode == 0, result.stdout
    assert "1 fixed" in result.stdout
    assert "noise.normal_()" in path.read_text()
    assert memlint(tmp_path, "train.py").stdout.strip() == "All checks passed!"


def test_the_cache_sits_next_to_the_config_and_git_ignores_it(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    write(tmp_path, "pyproject.toml", "[tool.memlint]\nselect = [\"ALL\"]\n")
    write(tmp_path, "pkg/train.py", BAD)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert memlint(tmp_path / "pkg", "train.py").returncode == 1
    assert (tmp_path / ".memlint_cache").is_dir() and not (tmp_path / "pkg/.memlint_cache").exists()
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=tmp_path,
                            capture_output=True, text=True, check=True).stdout
    assert ".memlint_cache" not in status and "pkg/train.py" in status


def test_no_cache_writes_nothing_and_cache_dir_moves_it(tmp_path):
    write(tmp_path, "train.py", BAD)
    memlint(tmp_path, "--no-cache", "train.py")
    assert not (tmp_path / ".memlint_cache").exists()
    memlint(tmp_path, "--cache-dir", str(tmp_path / "elsewhere"), "train.py")
    assert not (tmp_path / ".memlint_cache").exists()
    assert list((tmp_path / "elsewhere").rglob("*.json"))


def test_cache_dir_holding_other_things_keeps_them_and_is_not_gitignored(tmp_path):
    keep = write(tmp_path, "shared/notes.txt", "mine\n")
    write(tmp_path, "shared/0.0.1-old/x.txt", "not a cache folder of ours\n")
    write(tmp_path, "train.py", BAD)
    memlint(tmp_path, "--cache-dir", "shared", "train.py")
    assert keep.read_text() == "mine\n" and (tmp_path / "shared/0.0.1-old/x.txt").exists()
    assert not (tmp_path / "shared/.gitignore").exists()


def test_runs_at_the_same_time_share_a_cache_without_harm(tmp_path):
    _tree(tmp_path)
    expected = memlint(tmp_path, "--no-cache", "--select", "ALL", "--output-format", "json", ".")
    env_args = ["--select", "ALL", "--output-format", "json", "-j", "2", "."]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    runs = [subprocess.Popen([sys.executable, "-m", "memlint", *env_args], cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outputs = [process.communicate(timeout=120) for process in runs]
    assert all(out == expected.stdout for out, _ in outputs)
    for entry in (tmp_path / ".memlint_cache").rglob("*"):
        assert not entry.name.endswith(".tmp")
        if entry.suffix == ".json":
            _payload(entry)
    assert memlint(tmp_path, *env_args).stdout == expected.stdout


def test_profile_names_phases_rules_and_facts_on_stderr(tmp_path):
    write(tmp_path, "train.py", AMP)
    result = memlint(tmp_path, "--profile", "--no-cache", "--extend-select", "MEM402", "--output-format", "json",
                     "train.py")
    json.loads(result.stdout)  # the report stays machine-readable
    err = result.stderr
    assert err.startswith("profile: 1 files")
    for heading in ("slowest files", "phases", "rules", "facts"):
        assert f"\n{heading}" in err
    assert "  parse " in err and "  MEM402 " in err and "  train.py " in err
    assert "TorchNames" in err  # a fact, charged apart from the rules that asked for it


def test_a_notebook_is_cached_with_its_cells_and_its_place_in_the_file(tmp_path, monkeypatch):
    from test_notebook import code, save, study

    write(tmp_path, "train.py", BAD)
    save(tmp_path, "study.ipynb", study())
    broken = study()
    broken["cells"].insert(3, code("def broken(:\n    pass"))  # an error, and findings in the other cells
    save(tmp_path, "broken.ipynb", broken)
    write(tmp_path, "not_one.ipynb", '{"cells": [')
    forms = (("--output-format", "text"), ("--output-format", "json"), ("--output-format", "sarif"),
             ("--output-format", "github"))
    fresh = [memlint(tmp_path, "--no-cache", *form, ".") for form in forms]
    for _ in range(2):  # the run that fills the cache, then one that reads it
        for form, expected in zip(forms, fresh):
            result = memlint(tmp_path, *form, ".")
            assert (result.returncode, result.stdout, result.stderr) == \
                (expected.returncode, expected.stdout, expected.stderr)
    assert "cell 5" in fresh[0].stdout and '"cell": 5' in fresh[1].stdout

    counting = _Counting(monkeypatch)
    config = Config(root=tmp_path, selection=Selection(extend_select=["MEM101"]))
    options = Options(jobs=1, memory_budget=0, cache=open_cache(config, tmp_path / "cache"))
    cold = run([str(tmp_path)], config, registry(), options)
    counting.compiled = 0
    warm = run([str(tmp_path)], config, registry(), options)
    assert counting.compiled == 0
    assert [(o.display, o.findings, o.error, o.notebook is not None) for o in warm] == \
        [(o.display, o.findings, o.error, o.notebook is not None) for o in cold]
    assert [o.notebook is not None for o in warm] == [True, False, True, False]  # not_one.ipynb: none


def test_a_warm_run_over_the_same_project_reads_no_summary(tmp_path, monkeypatch):
    _tree(tmp_path / "src")
    cold = _lint(tmp_path / "src", tmp_path / "cache")

    def no_summary(*args):
        raise AssertionError("a summary was read")

    monkeypatch.setattr(run_module.Cache, "get_summary", no_summary)
    assert _lint(tmp_path / "src", tmp_path / "cache") == cold


def test_a_result_is_kept_for_the_name_a_run_shows_its_file_by(tmp_path):
    """Under `tests/` a file is a test module, where only the rules of tests report; run from
    inside that folder, the same file is shown as `helper.py`, and is not."""
    write(tmp_path, "pyproject.toml", "[tool.memlint]\n")
    write(tmp_path, "tests/helper.py", BAD)
    assert memlint(tmp_path, "tests/helper.py").returncode == 0
    expected = memlint(tmp_path / "tests", "--no-cache", "helper.py")
    assert expected.returncode == 1
    result = memlint(tmp_path / "tests", "helper.py")
    assert (result.returncode, result.stdout) == (expected.returncode, expected.stdout)


def test_runs_that_save_one_after_the_other_keep_each_others_records(tmp_path):
    config = Config(root=tmp_path)
    first, second = open_cache(config, tmp_path / "cache"), open_cache(config, tmp_path / "cache")
    assert first.get("a", "text", []) is None  # the first run read the bundle (there was none) ...
    second.put("b", "text", Entry([], error="b"))
    second.save()  # ... and the second wrote one meanwhile
    first.put("a", "text", Entry([], error="a"))
    first.save()
    again = open_cache(config, tmp_path / "cache")
    assert (again.get("a", "text", []).error, again.get("b", "text", []).error) == ("a", "b")
