"""Valid code that nests deeply (long `+` chains, chained calls, conditional expressions):
CPython compiles it, and memlint lints and fixes it instead of failing on Python's recursion
limit; code deeper than its analysis can follow is skipped with a one-line warning."""

from __future__ import annotations

from pathlib import Path

import pytest

from memlint import engine
from memlint.config import Config, Selection
from memlint.rules import registry
from memlint.run import Options, run
from test_cli import memlint

PLUS = " + ".join(f"a{i}" for i in range(500))
CALLS = "".join(f".f{i}()" for i in range(250))
CONDITIONAL = " if c else ".join(str(i) for i in range(600))
DEEP = {
    "plus.py": f"import torch\nfor b in loader:\n    total = {PLUS}\n",
    "calls.py": f"import torch\nmodel.eval()\nfor b in loader:\n    y = model(b){CALLS}\n",
    "conditional.py": f"import torch\nfor b in loader:\n    z = torch.randn({CONDITIONAL})\n",
}
LOOP = "import torch\nfor step in range(10):\n    noise = torch.randn(n, n)\n    loss = model(noise).sum()\n"


@pytest.mark.parametrize("name", sorted(DEEP))
def test_deep_valid_code_is_linted_and_fixed(tmp_path, name):
    compile(DEEP[name], name, "exec")  # valid Python
    path = tmp_path / name
    path.write_text(LOOP + DEEP[name], encoding="utf-8")
    result = memlint(tmp_path, "--no-cache", name)
    assert result.stderr == "" and result.returncode == 1, result.stderr
    assert f"{name}:3:5: MEM101" in result.stdout
    fixed = memlint(tmp_path, "--no-cache", "--fix", name)
    assert fixed.stderr == "" and fixed.returncode in (0, 1), fixed.stderr
    assert "noise.normal_()" in path.read_text(encoding="utf-8")
    compile(path.read_text(encoding="utf-8"), name, "exec")


def test_code_deeper_than_the_analysis_follows_is_skipped_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setattr(engine, "ANALYSIS_FRAMES", 1000)  # as if the code nested deeper than the raised limit
    for name, text in DEEP.items():
        (tmp_path / name).write_text(LOOP + text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    config = Config(root=Path(tmp_path), selection=Selection(extend_select=["MEM101"]))
    for options in (Options(), Options(fix=True)):
        outcomes = run(sorted(DEEP), config, registry(), options)
        assert [(o.error, o.warning) for o in outcomes] == \
            [(None, "not linted: its code nests too deeply for memlint's analysis")] * len(DEEP)
    assert all((tmp_path / name).read_text(encoding="utf-8") == LOOP + text for name, text in DEEP.items())
