"""Jupyter notebooks through the command line, as a user runs it: cells analysed as one module,
IPython lines masked, `cell N` locations, fixes written into code cells and nothing else."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def select_mem101(tmp_path):
    """The example rule of these notebooks, MEM101, is opt-in: each test's folder selects it."""
    (tmp_path / "pyproject.toml").write_text('[tool.memlint]\nextend-select = ["MEM101"]\n', encoding="utf-8")


def memlint(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-m", "memlint", *args], cwd=cwd, env=env,
                            capture_output=True, text=True, timeout=120)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def code(source: str, outputs=None, count=1) -> dict:
    lines = source.splitlines(keepends=True)
    return {"cell_type": "code", "execution_count": count, "metadata": {"tags": ["keep-me"]},
            "outputs": outputs or [], "source": lines}


def markdown(text: str) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": text.splitlines(keepends=True)}


def notebook(*cells: dict, language: str = "python") -> dict:
    return {"cells": list(cells),
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": language, "name": "python3"},
                         "language_info": {"name": language, "version": "3.11.0"}},
            "nbformat": 4, "nbformat_minor": 5}


def dump(data: dict, indent=1, ensure_ascii=False, newline=True, eol="\n") -> str:
    text = json.dumps(data, indent=indent, ensure_ascii=ensure_ascii) + ("\n" if newline else "")
    return text.replace("\n", eol)  # the layout's line breaks: strings hold escaped ones only


def save(folder: Path, name: str, data: dict, **layout) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(dump(data, **layout).encode("utf-8"))
    return path


def read(path: Path) -> str:
    return path.read_bytes().decode("utf-8")


STREAM = [{"name": "stdout", "output_type": "stream", "text": ["epoch 0 done\n"]}]
SETUP = "import torch\nmodel = torch.nn.Linear(64, 64)\n"
TRAIN = ("opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
         "for step in range(10):\n"
         "    noise = torch.randn(1024, 1024)\n"
         "    loss = model(noise).sum()\n"
         "    loss.backward()\n"
         "    opt.step()\n"
         "    opt.zero_grad()")
TRAIN_FIXED = ("opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
               "noise = torch.empty(1024, 1024)\n"
               "for step in range(10):\n"
               "    noise.normal_()\n"
               "    loss = model(noise).sum()\n"
               "    loss.backward()\n"
               "    opt.step()\n"
               "    opt.zero_grad()")


def study() -> dict:
    """Markdown first, the model built in cell 2, the training loop in cell 5."""
    return notebook(markdown("# A study é\n"), code(SETUP), markdown("Now train."),
                    code("print('ready')", outputs=STREAM), code(TRAIN, outputs=STREAM, count=4))


def test_cells_are_one_module_and_locations_name_the_cell(tmp_path):
    save(tmp_path, "nb.ipynb", study())
    result = memlint(tmp_path, "nb.ipynb")
    assert result.returncode == 1, result.stderr
    assert result.stdout.splitlines()[0].startswith("nb.ipynb:cell 5:3:5: MEM101 [*] `noise`")
    [item] = json.loads(memlint(tmp_path, "--output-format", "json", "nb.ipynb").stdout)
    assert (item["cell"], item["line"], item["column"]) == (5, 3, 5)
    assert "+    \"noise = torch.empty(1024, 1024)\\n\"," in item["fix"]["diff"]


def test_the_model_of_another_cell_is_what_makes_it_training(tmp_path):
    # MEM301 needs the optimizer and the model; here they come from three different cells.
    cells = notebook(code("import torch\nmodel = torch.nn.Linear(4, 4)"),
                     code("opt = torch.optim.SGD(model.parameters(), lr=0.1)"),
                     code("for x in batches:\n    loss = model(x).sum()\n    loss.backward()\n    opt.step()"))
    save(tmp_path, "nb.ipynb", cells)
    result = memlint(tmp_path, "nb.ipynb")
    assert "nb.ipynb:cell 3:3:5: MEM301" in result.stdout


@pytest.mark.parametrize("layout", [
    {"indent": 1, "ensure_ascii": False, "newline": True},  # what Jupyter writes
    {"indent": 2, "ensure_ascii": True, "newline": False},
    {"indent": None, "ensure_ascii": False, "newline": False},  # all on one line
    {"indent": 1, "ensure_ascii": False, "newline": True, "eol": "\r\n"},  # saved on Windows
])
def test_fix_rewrites_code_cells_only_and_keeps_the_json_layout(tmp_path, layout):
    path = save(tmp_path, "nb.ipynb", study(), **layout)
    result = memlint(tmp_path, "--fix", "nb.ipynb")
    assert result.returncode == 0, result.stdout + result.stderr
    expected = study()
    expected["cells"][4]["source"] = TRAIN_FIXED.splitlines(keepends=True)
    assert read(path) == dump(expected, **layout)  # byte for byte
    second = memlint(tmp_path, "--fix", "nb.ipynb")
    assert second.returncode == 0 and read(path) == dump(expected, **layout)


def test_fix_keeps_cr_only_line_endings_in_a_cell(tmp_path):
    def cr(text: str) -> List[str]:  # a notebook written where lines end in CR alone
        return (text + "\n").replace("\n", "\r").splitlines(keepends=True)

    data = study()
    data["cells"][1]["source"] = cr(SETUP.rstrip("\n"))
    data["cells"][4]["source"] = cr(TRAIN)
    path = save(tmp_path, "nb.ipynb", data)
    assert memlint(tmp_path, "--fix", "nb.ipynb").returncode == 0
    data["cells"][4]["source"] = cr(TRAIN_FIXED)
    assert read(path) == dump(data)


def test_values_json_has_no_word_for_are_kept(tmp_path):
    data = study()
    data["cells"][4]["metadata"]["scores"] = [float("nan"), float("inf"), -1.5e-300]
    path = save(tmp_path, "nb.ipynb", data)
    assert memlint(tmp_path, "--fix", "nb.ipynb").returncode == 0
    data["cells"][4]["source"] = TRAIN_FIXED.splitlines(keepends=True)
    assert path.read_text(encoding="utf-8") == dump(data)


def test_a_source_stored_as_one_string_stays_one_string(tmp_path):
    data = study()
    data["cells"][4]["source"] = TRAIN
    path = save(tmp_path, "nb.ipynb", data)
    assert memlint(tmp_path, "--fix", "nb.ipynb").returncode == 0
    assert json.loads(path.read_text(encoding="utf-8"))["cells"][4]["source"] == TRAIN_FIXED


def test_diff_shows_the_change_and_writes_nothing(tmp_path):
    path = save(tmp_path, "nb.ipynb", study())
    before = path.read_text(encoding="utf-8")
    result = memlint(tmp_path, "--diff", "nb.ipynb")
    assert result.returncode == 1
    assert '-    "    noise = torch.randn(1024, 1024)\\n",' in result.stdout
    assert '+    "    noise.normal_()\\n",' in result.stdout
    assert path.read_text(encoding="utf-8") == before


MAGICS = ("!pip install torch\n"
          "%matplotlib inline\n"
          "torch.randn?\n"
          "?torch.zeros\n"
          "files = !ls\n"
          "total = (3\n"
          "         % 2)\n"  # the modulo operator inside brackets is Python, not a magic
          "for step in range(10):\n"
          "    %time x = 1\n"
          "    noise = torch.randn(1024, 1024)\n"
          "    loss = model(noise).sum()\n"
          "    loss.backward()\n"
          "    opt.step()\n"
          "    opt.zero_grad()\n")


def test_ipython_lines_are_masked_not_errors_and_come_back_after_a_fix(tmp_path):
    cells = notebook(code(SETUP + "opt = torch.optim.SGD(model.parameters(), lr=0.1)"),
                     code(MAGICS),
                     code("%%timeit\nfor step in range(3):\n    buf = torch.randn(1024, 1024)\n    out = model(buf).sum()"))
    path = save(tmp_path, "nb.ipynb", cells)
    result = memlint(tmp_path, "nb.ipynb")
    assert result.returncode == 1 and result.stderr == "", result.stderr
    assert [line.split(" ")[:2] for line in result.stdout.splitlines()[:2]] == [
        ["nb.ipynb:cell", "2:10:5:"], ["nb.ipynb:cell", "3:3:5:"]]
    assert memlint(tmp_path, "--fix", "nb.ipynb").returncode == 0
    fixed = "".join(json.loads(path.read_text(encoding="utf-8"))["cells"][1]["source"])
    assert fixed == MAGICS.replace("for step", "noise = torch.empty(1024, 1024)\nfor step").replace(
        "    noise = torch.randn(1024, 1024)\n", "    noise.normal_()\n")


def test_a_magic_line_keeps_its_place_when_a_fix_indents_its_block(tmp_path):
    cells = notebook(code(SETUP + "batches = [torch.randn(2, 64)]\nmodel.eval()\n"),
                     code("outs = []\nfor x in batches:\n    y = model(x)\n"
                          "    %time print(y.shape)\n    outs.append(y)"))
    path = save(tmp_path, "nb.ipynb", cells)
    result = memlint(tmp_path, "--fix", "nb.ipynb")
    assert "cannot" not in result.stderr, result.stderr
    fixed = "".join(json.loads(path.read_text(encoding="utf-8"))["cells"][1]["source"])
    assert "with torch.no_grad():\n    for x in batches:\n        y = model(x)\n        %time print(y.shape)\n" in fixed


def test_cells_that_are_not_python_are_left_alone(tmp_path):
    bad_loop = "import torch\nfor step in range(10):\n    noise = torch.randn(1024, 1024)\n    use(noise)\n"
    save(tmp_path, "shell.ipynb", notebook(code("%%bash\n" + bad_loop)))
    save(tmp_path, "r.ipynb", notebook(code(bad_loop), language="R"))
    save(tmp_path, "md.ipynb", notebook(markdown(bad_loop)))
    result = memlint(tmp_path, "shell.ipynb", "r.ipynb", "md.ipynb")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "All checks passed!"


def test_a_cell_that_does_not_parse_is_reported_and_the_others_are_linted(tmp_path):
    data = study()
    data["cells"].insert(3, code("def broken(:\n    pass"))
    path = save(tmp_path, "nb.ipynb", data)
    before = path.read_text(encoding="utf-8")
    result = memlint(tmp_path, "nb.ipynb")
    assert result.returncode == 2
    assert result.stderr.strip() == "nb.ipynb: error: cell 4: cannot parse: invalid syntax (line 1, column 12)"
    assert "nb.ipynb:cell 6:3:5: MEM101" in result.stdout
    fixed = memlint(tmp_path, "--fix", "nb.ipynb")  # as ruff does: a notebook that does not parse is not fixed
    assert fixed.returncode == 2 and "nb.ipynb:cell 6:3:5: MEM101" in fixed.stdout
    assert before == path.read_text(encoding="utf-8")


def test_a_cell_that_awaits_at_its_top_level_is_python_in_a_notebook_and_nowhere_else(tmp_path):
    """Jupyter runs a cell's top-level `await` (and `async for`) in its event loop: an agent
    or a client library's demo does; the notebook is linted and fixed like any other."""
    data = study()
    data["cells"].insert(3, code("reply = await client.chat(prompt)\nasync for chunk in stream:\n    print(chunk)"))
    path = save(tmp_path, "nb.ipynb", data)
    result = memlint(tmp_path, "nb.ipynb")
    assert (result.returncode, result.stderr) == (1, ""), result.stderr
    assert result.stdout.startswith("nb.ipynb:cell 6:3:5: MEM101")
    assert memlint(tmp_path, "--fix", "nb.ipynb").returncode == 0
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    assert "".join(cells[5]["source"]) == TRAIN_FIXED
    assert "".join(cells[3]["source"]).startswith("reply = await client.chat(prompt)\n")
    (tmp_path / "script.py").write_text("reply = await client.chat(prompt)\n", encoding="utf-8")
    script = memlint(tmp_path, "script.py")
    assert script.returncode == 2 and "'await' outside function" in script.stderr


@pytest.mark.parametrize("content,words", [
    ('{"cells": [', "not a notebook: invalid JSON"),
    ("[1, 2]", "not a notebook: no list of cells"),
    ('{"worksheets": [], "nbformat": 3}', "nbformat 3 notebooks are not supported"),
])
def test_a_notebook_that_is_not_one_is_a_one_line_error(tmp_path, content, words):
    (tmp_path / "bad.ipynb").write_text(content, encoding="utf-8")
    save(tmp_path, "good.ipynb", study())
    result = memlint(tmp_path, "bad.ipynb", "good.ipynb")
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("bad.ipynb: error: ") and words in line
    assert "good.ipynb:cell 5:3:5: MEM101" in result.stdout


def test_noqa_works_in_a_cell(tmp_path):
    data = study()
    data["cells"][4]["source"] = TRAIN.replace("torch.randn(1024, 1024)", "torch.randn(1024, 1024)  # noqa: MEM101")
    save(tmp_path, "nb.ipynb", data)
    result = memlint(tmp_path, "nb.ipynb")
    assert result.returncode == 0, result.stdout


def test_folders_are_walked_for_notebooks(tmp_path):
    save(tmp_path, "project/notebooks/study.ipynb", study())
    save(tmp_path, "project/notebooks/.ipynb_checkpoints/study-checkpoint.ipynb", study())
    result = memlint(tmp_path, "project")
    lines: List[str] = result.stdout.splitlines()
    assert [line.split(" ")[0] for line in lines if "MEM" in line] == [
        os.path.join("project", "notebooks", "study.ipynb") + ":cell"]


def test_a_fix_that_would_move_code_across_cells_is_refused():
    from memlint.notebook import Notebook, NotebookError

    nb = Notebook.from_text(dump(study()))
    boundary = next(line for line in nb.module.splitlines(keepends=True) if line.startswith("pass  # memlint cell"))
    with pytest.raises(NotebookError, match="across notebook cells"):
        nb.updated(nb.module.replace(boundary, ""))  # cell 4's code would join cell 2's
    with pytest.raises(NotebookError, match="across notebook cells"):
        nb.updated(nb.module + boundary)
    assert nb.updated(nb.module).text == nb.text


def test_cells_libcst_rejects_are_set_aside_with_their_own_error():
    # CPython accepts every cell it is given here; on a newer Python, syntax LibCST does not know
    # yet gets this far. Such a cell is reported by number and the others are still linted.
    from dataclasses import replace

    from memlint.notebook import Notebook

    nb = Notebook.from_text(dump(study()))
    assert nb.without_unparsable_cells() is nb
    nb.cells[1] = replace(nb.cells[1], masked="def broken(:\n")
    parsable = nb.without_unparsable_cells()
    assert [cell.number for cell in parsable.cells] == [2, 5]
    [problem] = parsable.problems
    assert problem.startswith("cell 4: cannot parse:")
