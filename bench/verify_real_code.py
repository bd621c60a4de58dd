"""memlint's fixes verified on real third-party scripts, on a GPU, with random data.

    python bench/verify_real_code.py nanogpt PATH/TO/nanoGPT [--repeat N] [--keep DIR]
    python bench/verify_real_code.py super-resolution PATH/TO/pytorch-examples [--repeat N] [--keep DIR]

`nanogpt`: nanoGPT's train.py (a training loop: GPT, AdamW, fp16 autocast with a GradScaler,
two micro-steps a step) with a tiny configuration and random tokens. `super-resolution`:
pytorch/examples' super_resolution/main.py, whose test() is an evaluation loop, with random
images, run so that the evaluation holds the script's peak (training batches of 4, evaluation
batches of 32).

Nothing of either project is kept here: the files the script needs are copied from the checkout
into a scratch folder, random data is written next to them, and there `memlint check` (every
rule) says what memlint finds and `memlint verify` runs the script before and after each fix,
printing each fix's peak before and after and the lines holding the memory at the peak. Every
rule is selected, so findings of rules added later are verified by the same command.
"""

from __future__ import annotations

import argparse
import array
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 50257  # GPT-2's tokens; nanoGPT pads its embedding to 50304
TOKENS = 400_000  # per split: enough windows of 256 for random batches


def _nanogpt(checkout: Path, work: Path) -> Tuple[str, List[str]]:
    for name in ("train.py", "model.py", "configurator.py"):
        shutil.copy(checkout / name, work / name)
    data = work / "data" / "random"
    data.mkdir(parents=True)
    rng = random.Random(0)
    for split in ("train", "val"):
        with open(data / f"{split}.bin", "wb") as handle:  # uint16 tokens, as nanoGPT's prepare.py writes
            array.array("H", (rng.randrange(VOCAB) for _ in range(TOKENS))).tofile(handle)
    return "train.py", [
        "--dataset=random", "--device=cuda", "--dtype=float16", "--compile=False", "--out_dir=out",
        "--batch_size=8", "--block_size=256", "--n_layer=4", "--n_head=4", "--n_embd=256", "--dropout=0.0",
        "--gradient_accumulation_steps=2", "--max_iters=20", "--lr_decay_iters=20", "--warmup_iters=2",
        "--eval_interval=1000", "--eval_iters=2", "--log_interval=5", "--always_save_checkpoint=False",
    ]


def _super_resolution(checkout: Path, work: Path) -> Tuple[str, List[str]]:
    from PIL import Image  # torchvision's dependency, there wherever the script can run

    source = checkout / "super_resolution"
    for name in ("main.py", "model.py", "data.py", "dataset.py"):
        shutil.copy(source / name, work / name)
    rng = random.Random(0)
    for split, count in (("train", 16), ("test", 96)):  # data.py downloads nothing once these exist
        folder = work / "dataset" / "BSDS300" / "images" / split
        folder.mkdir(parents=True)
        for index in range(count):
            Image.frombytes("RGB", (256, 256), rng.randbytes(256 * 256 * 3)).save(folder / f"{index}.jpg")
    return "main.py", ["--upscale_factor", "3", "--batchSize", "4", "--testBatchSize", "32", "--nEpochs", "1",
                       "--threads", "0", "--accel"]


SCRIPTS: Dict[str, Callable[[Path, Path], Tuple[str, List[str]]]] = {
    "nanogpt": _nanogpt, "super-resolution": _super_resolution}


def _memlint(*args: str, cwd: Path) -> int:
    print(f"$ memlint {' '.join(args)}", flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "memlint", *args], cwd=cwd, env=env).returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("script", choices=sorted(SCRIPTS))
    parser.add_argument("checkout", type=Path, help="a checkout of nanoGPT, or of pytorch/examples")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each program (2)")
    parser.add_argument("--keep", type=Path, help="work in this folder (kept) instead of a scratch one")
    args = parser.parse_args()

    work = args.keep or Path(tempfile.mkdtemp(prefix="memlint-real-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        script, script_args = SCRIPTS[args.script](args.checkout.resolve(), work)
        _memlint("check", "--select", "ALL", "--no-cache", script, cwd=work)
        return _memlint("verify", script, "--device", "cuda", "--repeat", str(args.repeat), "--", *script_args,
                        cwd=work)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
