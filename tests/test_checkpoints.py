"""How a project saves its checkpoints, and what MEM502 and MEM505 make of it
(memlint.analysis.checkpoints): a checkpoint saved from the CPU lands on no GPU, one holding
parsed arguments or a configuration cannot be loaded with `weights_only=True`."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from memlint.analysis import Facts
from memlint.engine import check
from memlint.rules import registry
from memlint.torch_target import TorchVersion
from tests.test_project import lint, tree

RULES = registry()


def _facts(source: str) -> Facts:
    return Facts(cst.parse_module(textwrap.dedent(source)))


def _findings(source: str, code: str, target=None):
    return check(textwrap.dedent(source), "train.py", [RULES[code]], target).findings


@pytest.mark.parametrize("saved,cpu", [
    ("torch.save(model.state_dict(), 'm.pt')", False),
    ("torch.save(model.cpu().state_dict(), 'm.pt')", True),
    ("torch.save(model.to(device).state_dict(), 'm.pt')", False),
    ("model.cpu()\ntorch.save(model.state_dict(), 'm.pt')", True),
    ("model = model.to('cpu')\ntorch.save(model.state_dict(), 'm.pt')", True),
    ("model.cpu()\nmodel.cuda()\ntorch.save(model.state_dict(), 'm.pt')", False),
    ("torch.save({k: v.cpu() for k, v in model.state_dict().items()}, 'm.pt')", True),
    ("torch.save({'model': model.state_dict(), 'epoch': 3}, 'm.pt')", False),
    ("state = utils.move_to_cpu({'model': model.state_dict()})\ntorch.save(state, 'm.pt')", True),
    ("cfg = FullStateDictConfig(offload_to_cpu=True)\nstate = model.state_dict()\ntorch.save(state, 'm.pt')", True),
])
def test_where_a_save_writes_from(saved, cpu):
    [save] = _facts("import torch\nmodel = Net().cuda()\n" + saved + "\n").checkpoints.saves
    assert save.cpu is cpu
    assert save.files == {"m.pt"}


def test_what_a_save_writes_and_a_load_reads():
    facts = _facts("""\
        import os
        import torch

        def save_ckpt(model, path, model_class):
            ckpt = {"state_dict": model.state_dict(), "model_class": model_class, "args": args}
            ckpt["epoch"] = 3
            torch.save(ckpt, os.path.join(path, "best.pt"))

        save_ckpt(net, out, cfg[cfg.model])

        def load_ckpt(path):
            ckpt = torch.load(path)
            model = Predictor(**ckpt["model_class"])
            model.load_state_dict(ckpt["state_dict"])
            return model, ckpt.get("epoch")
        """)
    [save] = facts.checkpoints.saves
    assert save.files == {"best.pt"} and save.keys == {"state_dict", "model_class", "args", "epoch"}
    assert save.objects == ("`cfg`", "`args`")  # `model_class` is what the call passes: `cfg[...]`
    load = facts.checkpoints.load(next(n for n in facts.tree.nodes if isinstance(n, cst.Call)
                                       and facts.names.call_name(n) == "torch.load"))
    assert load.keys == {"model_class", "state_dict", "epoch"} and load.into_cpu is True
    assert facts.checkpoints.matching(load) == [save]


CPU_MODEL = """\
    import torch
    model = Net()
    model.load_state_dict(torch.load(args.weights))
    model.cuda()
    """


def test_into_a_model_still_on_the_cpu_the_message_says_what_happens():
    [finding] = _findings(CPU_MODEL, "MEM502")
    assert "still on the CPU" in finding.message and "twice" not in finding.message
    assert "in every process, the same one" in finding.message
    [gpu] = _findings(CPU_MODEL.replace("model = Net()", "model = Net().cuda()"), "MEM502")
    assert "holds the weights twice" in gpu.message and "still on the CPU" not in gpu.message


def test_a_gpu_save_of_the_same_module_is_named_in_the_message():
    [finding] = _findings("""\
        import torch
        net = Net().cuda()
        torch.save({"net": net.state_dict(), "epoch": 3}, "./checkpoint/ckpt.pth")
        checkpoint = torch.load("./checkpoint/ckpt.pth")
        net.load_state_dict(checkpoint["net"])
        """, "MEM502")
    assert "which this project saves from a GPU" in finding.message


SAVED_ELSEWHERE = {
    "proj/__init__.py": "",
    "proj/train.py": """\
        import torch

        def save(model):
            model.cpu()
            torch.save(model.state_dict(), "weights/best.pt")
        """,
    "proj/serve.py": """\
        import torch

        def load(model):
            model.load_state_dict(torch.load("weights/best.pt"))
        """,
}


def test_a_file_another_module_saves_from_the_cpu(tmp_path):
    tree(tmp_path, SAVED_ELSEWHERE)
    serve = tmp_path / "proj/serve.py"
    assert ("serve.py", 4, "MEM502") not in lint(tmp_path)
    assert ("serve.py", 4, "MEM502") not in lint(tmp_path, serve)  # alone: it cannot know, so it does not say
    train = tmp_path / "proj/train.py"
    train.write_text(train.read_text().replace("model.cpu()", "model.cuda()"))
    assert ("serve.py", 4, "MEM502") in lint(tmp_path)
    assert ("serve.py", 4, "MEM502") not in lint(tmp_path, serve)


def test_a_changed_saving_module_changes_the_cached_result_of_the_loading_one(tmp_path):
    tree(tmp_path / "src", SAVED_ELSEWHERE)
    cache = tmp_path / "cache"
    assert ("serve.py", 4, "MEM502") not in lint(tmp_path / "src", cache=cache)
    train = tmp_path / "src/proj/train.py"
    train.write_text(train.read_text().replace("model.cpu()", "model.cuda()"))
    assert ("serve.py", 4, "MEM502") in lint(tmp_path / "src", cache=cache)


def test_a_file_alone_reports_no_more_than_in_its_project(tmp_path):
    paths = tree(tmp_path, {**SAVED_ELSEWHERE, "proj/gpu.py": """\
        import torch
        torch.save(net.cuda().state_dict(), "net.pt")
        net.load_state_dict(torch.load("net.pt"))
        state = torch.load("weights/best.pt")
        """})
    whole = set(lint(tmp_path))
    assert ("gpu.py", 3, "MEM502") in whole
    for path in paths:
        assert set(lint(tmp_path, path)) <= whole, path


RESUMED_WITH_ARGS = """\
    import torch

    def save(model, args):
        torch.save({"model": model.state_dict(), "args": args}, "last.pt")

    def resume(model):
        state = torch.load("last.pt", map_location="cpu")
        model.load_state_dict(state["model"])
    """


def test_a_checkpoint_saved_with_parsed_arguments_gets_no_weights_only_fix():
    [finding] = _findings(RESUMED_WITH_ARGS, "MEM505")
    assert finding.fix is None
    assert "this checkpoint holds `args`, which `weights_only=True` refuses, so from torch 2.6" in finding.message
    assert "this load fails: pass `weights_only=False` for files you trust" in finding.message
    [old] = _findings(RESUMED_WITH_ARGS, "MEM505", TorchVersion(1, 12))
    assert "pass `weights_only=False` where torch has the argument (1.13 and later" in old.message


def test_a_whole_model_loaded_gets_no_weights_only_fix():
    [finding] = _findings("import torch\nmodel = torch.load(args.checkpoint)\nmodel.eval()\n", "MEM505")
    assert finding.fix is None and "the model `model`" in finding.message
    [plain] = _findings("import torch\nstate = torch.load(args.checkpoint)\nnet.load_state_dict(state)\n", "MEM505")
    assert plain.fix is not None


def test_objects_another_module_saves_into_the_file(tmp_path):
    tree(tmp_path, {
        "proj/__init__.py": "",
        "proj/train.py": """\
            import torch

            def save(model, cfg):
                torch.save({"model": model.state_dict(), "cfg": cfg}, "checkpoint_best.pt")
            """,
        "proj/evaluate.py": """\
            import torch
            state = torch.load("checkpoint_best.pt", map_location="cpu")
            net.load_state_dict(state["model"])
            """,
    })
    from memlint.config import Config, Selection
    from memlint.rules import registry as rules
    from memlint.run import Options, run

    config = Config(root=tmp_path, selection=Selection(select=["MEM505"]))
    [outcome] = [o for o in run([str(tmp_path)], config, rules(), Options()) if o.display.endswith("evaluate.py")]
    [finding] = outcome.findings
    assert "holds `cfg`" in finding.message and finding.fix is None


def test_plain_dicts_under_any_name_keep_the_weights_only_fix():
    [finding] = _findings("""\
        import os
        import torch
        model_args = dict(n_layer=12, n_head=12)
        config = {k: v for k, v in globals().items() if isinstance(v, int)}
        torch.save({"model": model.state_dict(), "model_args": model_args, "config": config},
                   os.path.join(out_dir, "ckpt.pt"))
        checkpoint = torch.load(os.path.join(out_dir, "ckpt.pt"), map_location="cpu")
        model = GPT(**checkpoint["model_args"])
        model.load_state_dict(checkpoint["model"])
        """, "MEM505")
    assert finding.fix is not None


def test_a_state_dict_bound_to_a_model_like_name_is_not_a_whole_model():
    [finding] = _findings("import torch\nmodel_data = torch.load(path)\nmodel.load_state_dict(model_data)\n", "MEM505")
    assert finding.fix is not None


def test_a_checkpoint_read_as_numpy_arrays_gets_no_weights_only_fix():
    [finding] = _findings("""\
        import torch

        def load_bounds(path, n):
            bounds = torch.load(path)
            return torch.from_numpy(bounds[n])
        """, "MEM505")
    assert finding.fix is None
    assert "this checkpoint holds numpy arrays, which `weights_only=True` refuses" in finding.message


def test_models_taken_out_of_a_loaded_name_get_no_weights_only_fix():
    # an evaluation script's checkpoint of pickled modules: `weights_only=True` would refuse it
    [finding] = _findings("""\
        import torch
        checkpoint = "best.pth.tar"
        checkpoint = torch.load(checkpoint)
        decoder = checkpoint["decoder"]
        decoder = decoder.to(device)
        decoder.eval()
        encoder = checkpoint["encoder"].to(device).eval()
        """, "MEM505")
    assert finding.fix is None
    assert "the model `decoder`, the model `encoder`" in finding.message


def test_a_whole_model_kept_under_a_key_gets_no_weights_only_fix():
    [finding] = _findings("""\
        import torch

        def load_vocoder(path):
            vocoder = torch.load(path)["model"]
            vocoder = vocoder.cuda().eval()
            return vocoder
        """, "MEM505")
    assert finding.fix is None and "the model `vocoder`" in finding.message
    [plain] = _findings("""\
        import torch

        def load_weights(net, path):
            weights = torch.load(path)["model"]
            net.load_state_dict(weights)
        """, "MEM505")
    assert plain.fix is not None
    for state_dict in ("""\
        import torch

        def load(path):
            model = torch.load(path)["model"]
            return model
        """, """\
        import torch

        def load(path, build):
            model = torch.load(path)["weights"]
            model = build(model)
            model.eval()
            return model
        """):  # a state dict under the key "model"; a module built from the weights, then put in eval mode
        [finding] = _findings(state_dict, "MEM505")
        assert finding.fix is not None and "this checkpoint holds" not in finding.message
