"""MEM501 empty-cache-in-loop."""

from __future__ import annotations

import re
from typing import Optional

import libcst as cst

from memlint.analysis.cache import EMPTY_CACHE, only_empties_cache, picks_device
from memlint.analysis.guards import a_setting
from memlint.analysis.often import INNER
from memlint.analysis.tree import NEW_SCOPES, dotted_name, last_part, walk
from memlint.findings import Fix, Remove, Replace, Safety
from memlint.rule import Claim, Invalid, Rule
from memlint.rules._code import show

_READS = frozenset({"item", "float", "int", "detach", "cpu", "tolist", "numpy", "mean", "sum", "tuple", "list", "dict"})
_PIPELINE = re.compile(r"(^|_)pipe(line)?$", re.IGNORECASE)  # `pipe`, `pipeline`, `self.sd_pipe`
_STAGED = 3  # places that empty the cache in one module, from which on they are a plan (`_staged`)
# Handlers that catch an out-of-memory error: code guarded by them is a recovery protocol.
_CATCHES_OOM = re.compile(r"RuntimeError|OutOfMemoryError|Exception|BaseException")
# a training step that prints its chat model's answer every 500 steps
_CHAT_SAMPLE = (
    "import torch\nfor step, (x, y) in enumerate(loader):\n    loss = model(x.cuda(), labels=y.cuda()).loss\n"
    "    loss.backward()\n    optimizer.step()\n    optimizer.zero_grad()\n    if step % 500 == 0:\n"
    "        print(model.chat(tokenizer, \"Describe the weather.\"))\n"
)


def _samples(call: cst.Call) -> bool:
    """A diffusion pipeline's whole sampling run: `pipe(prompt, num_inference_steps=30)`, a
    call of a pipeline (named so, as diffusers names them) that says how many denoising steps
    to run; not one that only gathers settings (`dict(...)`, `kwargs.update(...)`, `partial(...)`)."""
    return bool(_PIPELINE.search(last_part(dotted_name(call.func)))) and any(
        arg.keyword is not None and arg.keyword.value == "num_inference_steps" for arg in call.args)


# A training step timed with CUDA events; EMPTY is what follows the reading of the time.
_TIMED_STEP = (
    "import torch\nimport torch.nn.functional as F\n\n\ndef train(model, loader, optimizer, device):\n"
    "    start = torch.cuda.Event(enable_timing=True)\n    end = torch.cuda.Event(enable_timing=True)\n"
    "    for step, (x, y) in enumerate(loader):\n        start.record()\n"
    "        loss = F.cross_entropy(model(x.to(device)), y.to(device))\n        optimizer.zero_grad()\n"
    "        loss.backward()\n        optimizer.step()\n        end.record()\n        torch.cuda.synchronize()\n"
    "        step_ms = start.elapsed_time(end)\nEMPTY        if step % 100 == 0:\n"
    "            print(step, loss.item(), step_ms)\n"
)

class EmptyCacheInLoop(Rule):
    """
    ## What it does
    Finds `torch.cuda.empty_cache()` that runs on every training or inference step: in the body
    of the step loop, or in a function every step calls (`forward`, Lightning's
    `training_step` or batch hooks, a helper of the same file called from the loop). And the
    call of a helper that does nothing but empty the cache (TRL's `empty_cache()`, which picks
    the device), of this module or of another module linted with it, made every step: reported
    at the call, not in the helper.

    ## Why is this bad?
    PyTorch keeps freed blocks in its caching allocator so the next step can reuse them without
    asking the driver. `empty_cache()` hands them all back, so the next step must `cudaMalloc`
    everything again, and freeing waits for the device. It does not lower the peak of the
    program itself: when an allocation fails the allocator already frees its cache and retries.
    On an H200 its fixture ran 1.5x slower with it every step (11.6 s against 7.6 s, 2.5 ms a
    step: docs/verified.md).

    ## Example
    ```python
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        torch.cuda.empty_cache()
    ```

    Use instead:
    ```python
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    ```

    ## When it is not reported
    - Right after a `del`, with more of the step after it (`del logits`, then
      `torch.cuda.empty_cache()`, then the reference model): a large tensor let go and its
      memory handed back on purpose, as RL trainers do between a step's generation, reference
      and policy forwards. Not as the step's last statement, nor before returns that only hand
      back what was computed.
    - In a function that also generates sequences (`model.generate(...)`, a chat model's
      `model.chat(...)`, a rollout): its KV caches take memory in shapes the forwards after it
      do not reuse. Likewise beside a diffusion pipeline's whole sampling run (`pipe(prompt,
      num_inference_steps=30)`), before its latents are decoded.
    - In a loop that trains nothing and times its iterations with CUDA events
      (`start.elapsed_time(end)` of a `torch.cuda.Event`): a benchmark, whose measurements should
      each start from the same cache.
    - In a module that empties the cache in three places or more, besides the helpers that do
      only that and the recovery from an OOM: a plan of memory staged by hand, kept or dropped
      as a whole.
    - In an `except` or `finally` block, or in a `try` that catches an out-of-memory error
      (recovery after an OOM); also under a flag the step set when it ran out of memory, or a
      count of the allocator's thrashing (`if found_cuda_oom == 1:`, `if
      num_consecutive_thrashes >= 2:`, composer's automatic micro-batching), called from there.
    - Between steps: an epoch loop, a loop over runs, evaluation phases or noise levels, epoch
      hooks.
    - Under a condition other than a device check or a flag of the settings (`if step % 100 ==
      0:`, `if i == 0:`, `if self.control.should_evaluate:`). A flag of the settings holds alike
      on every step (`if self.args.batch_eval_metrics:`, `if self.use_liger_loss:`) and is
      reported, but not a flag about memory (`if args.empty_cache:` asks for it). Also in a
      helper called under such a condition (`if self.iteration_step == self.initial_iter_step:`,
      a counter found equal to anything: one step), or past a test that leaves unless such a
      condition holds (`if step % every != 0: return` at the top of a sampling helper).
    - Where it cannot be told that the code runs per step.

    ## Fix
    Removes the call (with an `if` around it that only checks for the device). The call of a
    helper that only empties the cache goes, the helper stays for its other callers, and so
    does its import (another module may import the name through this one): where the call was
    its only use, a checker of unused imports will point at it.

    ## Fix safety
    Safe: emptying the cache changes how much memory the process reserves from the driver,
    never what it computes, nor the peak memory its tensors take.
    """

    CODE = "MEM501"
    NAME = "empty-cache-in-loop"
    MESSAGE = "`torch.cuda.empty_cache()` on every step makes the allocator ask the driver for all its memory again"
    FIX_SAFETY = Safety.SAFE
    CLAIM = Claim.TIME_LOWER
    REQUIRES = ("empty_cache",)

    VALID = (
        # a benchmark timing each image with CUDA events
        "import torch\n\n\ndef main(model, paths, device):\n    times = []\n"
        "    start = torch.cuda.Event(enable_timing=True)\n    end = torch.cuda.Event(enable_timing=True)\n"
        "    for path in paths:\n        img = load(path)\n        torch.cuda.empty_cache()\n        img = img.to(device)\n"
        "        start.record()\n        out = model(img)\n        end.record()\n        torch.cuda.synchronize()\n"
        "        times.append(start.elapsed_time(end))\n        save(out.cpu(), path)\n",
        # under a periodic test or the first step (`(step + 1) == 1`): not every step
        "import gc\nimport torch\n\n\ndef flush():\n    gc.collect()\n    torch.cuda.empty_cache()\n\n\n"
        "def train(model, loader, optimizer, every):\n    for step, batch in enumerate(loader):\n"
        "        loss = model(batch.cuda()).mean()\n        loss.backward()\n        optimizer.step()\n"
        "        optimizer.zero_grad()\n        if step % every == 0 or (step + 1) == 1:\n            flush()\n",
        # a method that trains one step, called once from `main` (a probe of the batch size)
        "import torch\nimport torch.nn.functional as F\n\n\nclass BatchSizeProbe:\n"
        "    def __init__(self, model, optimizer):\n        self.model, self.optimizer = model, optimizer\n\n"
        "    def try_batch(self, x, y):\n"
        "        \"\"\"One training step at this batch size: does it fit?\"\"\"\n"
        "        torch.cuda.reset_peak_memory_stats()\n        loss = F.cross_entropy(self.model(x), y)\n"
        "        loss.backward()\n        self.optimizer.step()\n"
        "        self.optimizer.zero_grad(set_to_none=True)\n"
        "        peak = torch.cuda.max_memory_allocated()\n        del loss\n"
        "        torch.cuda.empty_cache()\n        return peak\n\n\ndef main(model, optimizer, x, y):\n"
        "    probe = BatchSizeProbe(model, optimizer)\n    peak = probe.try_batch(x, y)\n"
        "    print(f\"peak {peak / 2**30:.1f} GiB\")\n",
        # under a flag that the step ran out of memory (composer's automatic micro-batching)
        "import torch\n\n\ndef shrink_microbatch(state):\n    state.microbatch_size //= 2\n"
        "    torch.cuda.empty_cache()\n\n\ndef train(model, loader, optimizer, state):\n    for batch in loader:\n"
        "        found_cuda_oom = 0\n        try:\n            loss = model(batch.cuda()).mean()\n"
        "            loss.backward()\n        except torch.cuda.OutOfMemoryError:\n            found_cuda_oom = 1\n"
        "        if found_cuda_oom == 1:\n            shrink_microbatch(state)\n            continue\n"
        "        optimizer.step()\n        optimizer.zero_grad()\n",
        # a singleton made on first use: the builder runs once, whatever calls the getter
        "import torch\n\n_ENGINE = None\n\n\ndef build_engine(model):\n    engine = compile_engine(model)\n"
        "    torch.cuda.empty_cache()\n    return engine\n\n\n"
        "def get_engine(model):\n    global _ENGINE\n    if _ENGINE is None:\n        _ENGINE = build_engine(model)\n"
        "    return _ENGINE\n\n\ndef train(model, loader, optimizer):\n    for batch in loader:\n"
        "        engine = get_engine(model)\n        loss = model(batch).mean()\n        loss.backward()\n"
        "        optimizer.step()\n        optimizer.zero_grad()\n",
        # once per epoch
        "import torch\nfor epoch in range(10):\n    for x, y in loader:\n        model(x).sum().backward()\n"
        "        opt.step()\n    torch.cuda.empty_cache()\n",
        # in an OOM handler
        "import torch\nfor x, y in loader:\n    try:\n        model(x).sum().backward()\n"
        "    except torch.cuda.OutOfMemoryError:\n        torch.cuda.empty_cache()\n",
        # every N steps
        "import torch\nfor i, (x, y) in enumerate(loader):\n    model(x).sum().backward()\n"
        "    if i % 100 == 0:\n        torch.cuda.empty_cache()\n",
        # a retry loop guarded by a try
        "import torch\ndef retry(batch_size):\n    while batch_size:\n        try:\n"
        "            torch.cuda.empty_cache()\n"
        "            return run(batch_size)\n        except RuntimeError:\n            batch_size //= 2\n",
        # at the end of a phase
        "import torch\nimport lightning as L\nclass M(L.LightningModule):\n    def on_validation_epoch_end(self):\n"
        "        torch.cuda.empty_cache()\n",
        # a `policy` method of a class that is no SimulEval agent: how often it runs is not known
        "import torch\nclass Planner:\n    def policy(self, states):\n        action = self.net(states)\n"
        "        torch.cuda.empty_cache()\n        return action\n",
        # a helper that empties the cache under a condition on a counter: not every step
        "import torch\n\ndef maybe_free():\n    if state.step % 100 == 0:\n        torch.cuda.empty_cache()\n\n"
        "for x in loader:\n    model(x).sum().backward()\n    opt.step()\n    maybe_free()\n",
        # right after a `del`: a large tensor let go on purpose, between the phases of a step
        "import torch\nfor batch in loader:\n    logits = policy(batch)\n    logprobs = logits.log_softmax(-1)\n"
        "    del logits\n    torch.cuda.empty_cache()\n    ref = ref_model(batch)\n    loss(logprobs, ref).backward()\n"
        "    optimizer.step()\n",
        # in a rollout that generates: the KV caches' blocks go back before the forwards that follow
        "import torch\nfor prompts in loader:\n    sequences = policy.generate(prompts)\n    torch.cuda.empty_cache()\n"
        "    loss(policy(sequences)).backward()\n    optimizer.step()\n",
        # one of the places a staged plan empties the cache between a step's phases
        "import torch\n\ndef step(batch):\n    torch.cuda.empty_cache()\n    out = rollout(policy, batch)\n"
        "    torch.cuda.empty_cache()\n    ref = ref_model(out)\n    torch.cuda.empty_cache()\n"
        "    loss(policy(out), ref).backward()\n    opt.step()\n\nfor batch in loader:\n    step(batch)\n",
        # an evaluation at each noise level: once per pass over the test set
        "import torch\n\n@torch.no_grad()\ndef robustness(model, test_loader, sigmas):\n    for sigma in sigmas:\n"
        "        for x, y in test_loader:\n            model(x + sigma * torch.randn_like(x)).argmax(1)\n"
        "        torch.cuda.empty_cache()\n",
        # `del`, empty_cache, then a return that runs the teacher: between the step's phases
        "import torch\nfrom transformers import Trainer\n\nclass Distiller(Trainer):\n"
        "    def compute_loss(self, model, inputs, return_outputs=False):\n        hidden = model(**inputs)\n"
        "        loss = self.loss_fn(hidden)\n        del hidden\n        torch.cuda.empty_cache()\n"
        "        if self.teacher is not None:\n            return self.distill(self.teacher(**inputs), loss)\n"
        "        else:\n            return loss\n",
        # under a flag the trainer sets now and then (HF's `control`): not every step
        "import torch\nfor step, batch in enumerate(loader):\n    model(batch).sum().backward()\n    opt.step()\n"
        "    if self.control.should_evaluate:\n        torch.cuda.empty_cache()\n",
        # in a helper that a step calls only when its counter equals where training resumed: once
        "import torch\n\ndef states_to_device(state):\n    torch.cuda.empty_cache()\n    for key in state:\n"
        "        state[key] = state[key].cuda()\n\nclass Trainer:\n    def train_step(self, batch):\n"
        "        self.model(batch.cuda()).mean().backward()\n"
        "        if self.iteration_step == self.initial_iter_step:\n"
        "            states_to_device(self.optimizer.state)\n        self.optimizer.step()\n",
        # under a flag the user sets to empty the cache: what they asked for
        "import torch\nfor x, y in loader:\n    model(x).sum().backward()\n    opt.step()\n"
        "    if args.empty_cache_each_step:\n        torch.cuda.empty_cache()\n",
        # between the levels of a noise schedule that trains at each: once per level
        "import torch\nfor t in timesteps:\n    for x in loader:\n        model(x, t).sum().backward()\n"
        "        opt.step()\n    torch.cuda.empty_cache()\n",
        # under a test of the data or of memory: not every step
        "import torch\nfor inputs in loader:\n    model(inputs.cuda()).sum().backward()\n    opt.step()\n"
        "    if inputs.shape[1] > 4096:\n        torch.cuda.empty_cache()\n"
        "    if torch.cuda.memory_reserved() > limit:\n        torch.cuda.empty_cache()\n",
        # a helper that returns early unless the step is a multiple of the interval: one step in N
        "import torch\n\ndef sample(pipe, prompt, step, every):\n    if step % every != 0:\n        return None\n"
        "    with torch.no_grad():\n        image = pipe(prompt)\n    torch.cuda.empty_cache()\n    return image\n\n"
        "for step, x in enumerate(loader):\n    model(x.cuda()).sum().backward()\n    opt.step()\n"
        "    sample(pipe, prompt, step, 100)\n",
        # after a diffusion pipeline's whole sampling run, before its latents are decoded
        "import torch\n\ndef sample_images(pipe, vae, prompts):\n    for prompt in prompts:\n"
        "        with torch.no_grad():\n            latents = pipe(prompt=prompt, num_inference_steps=30)\n"
        "        torch.cuda.empty_cache()\n        vae.decode(latents)\n\n"
        "for x in loader:\n    model(x.cuda()).sum().backward()\n    opt.step()\n    sample_images(pipe, vae, prompts)\n",
        # beside a chat model's answer per sample (InternVL's evaluations): a generation per iteration
        "import torch\noutputs = []\nfor pixel_values, questions in loader:\n"
        "    pixel_values = pixel_values.to(torch.bfloat16).cuda()\n    with torch.inference_mode():\n"
        "        pred = model.chat(tokenizer, pixel_values, questions[0], generation_config)\n"
        "        torch.cuda.empty_cache()\n    outputs.append(pred)\n",
        # ... or in a helper of this module that asks it
        "import torch\n\n\ndef ask(model, tokenizer, image, question):\n"
        "    pixel_values = load_image(image).to(torch.bfloat16).cuda()\n"
        "    return model.chat(tokenizer, pixel_values, question, dict(max_new_tokens=64))\n\n\n"
        "for item in questions:\n"
        "    answers.append(ask(model, tokenizer, item[\"image\"], item[\"question\"]))\n"
        "    torch.cuda.empty_cache()\n",
        # a helper asked for a validation only every N steps, through a flag computed from the counter
        "import gc\n\nimport torch\n\n\ndef free_memory():\n    if torch.cuda.is_available():\n"
        "        gc.collect()\n        torch.cuda.empty_cache()\n\n\n"
        "for step, batch in enumerate(loader):\n    loss = model(batch.cuda()).mean()\n"
        "    loss.backward()\n    optimizer.step()\n    optimizer.zero_grad()\n"
        "    should_run_validation = args.do_validation and step % args.validation_steps == 0\n"
        "    if should_run_validation:\n        free_memory()\n        validate(model)\n",
        # between whole cases of a sliding-window prediction, whose windows a helper loops over
        "import torch\n\n\ndef empty_cache(device):\n    if device.type == \"cuda\":\n"
        "        torch.cuda.empty_cache()\n    else:\n        pass\n\n\nclass Predictor:\n"
        "    def _windows(self, data, queue):\n"
        "        logits = torch.zeros(data.shape, device=self.device)\n        while True:\n"
        "            item = queue.get()\n            if item == \"end\":\n                break\n"
        "            patch, sl = item\n            logits[sl] += self._mirror_and_predict(patch)\n"
        "        return logits\n\n    def _mirror_and_predict(self, x):\n"
        "        return self.network(x) + self.network(x.flip(2)).flip(2)\n\n"
        "    @torch.inference_mode()\n    def predict_case(self, image):\n"
        "        empty_cache(self.device)\n"
        "        logits = self._windows(image.to(self.device), self.patches(image))\n"
        "        empty_cache(self.device)\n        return logits\n\n"
        "    def predict_all(self, cases):\n"
        "        return [self.predict_case(case).cpu() for case in cases]\n",
        # a lambda's conditional call every tenth step
        "import torch\n\n\ndef train(model, loader, optimizer):\n"
        "    for step, (x, y) in enumerate(loader):\n        model(x.cuda()).mean().backward()\n"
        "        optimizer.step()\n        optimizer.zero_grad()\n"
        "        free = lambda s: torch.cuda.empty_cache() if s % 10 == 0 else None\n"
        "        free(step)\n",
    )
    INVALID = (
        # an API client's `chat` (handed no tokenizer) runs nothing on the GPU
        Invalid(
            "import torch\nfrom llama_index.llms.openai import OpenAI\n\nllm = OpenAI(model=\"gpt-4o\")\n"
            "for images, question in loader:\n    feats = encoder(images.cuda())\n"
            "    print(llm.chat(describe(feats, question)))\n    torch.cuda.empty_cache()\n",
            "import torch\nfrom llama_index.llms.openai import OpenAI\n\nllm = OpenAI(model=\"gpt-4o\")\n"
            "for images, question in loader:\n    feats = encoder(images.cuda())\n"
            "    print(llm.chat(describe(feats, question)))\n"),
        # a training loop that asks its chat model for an answer only every 500 steps
        Invalid(_CHAT_SAMPLE + "    torch.cuda.empty_cache()\n", _CHAT_SAMPLE),
        # a training loop that times its steps with CUDA events: no benchmark
        Invalid(_TIMED_STEP.replace("EMPTY", "        torch.cuda.empty_cache()\n"), _TIMED_STEP.replace("EMPTY", "")),
        # a singleton emptied again on every step is built again on every step
        Invalid(
            "import torch\n\n_PIPE = None\n\n\ndef build_pipe(model):\n    pipe = make_pipe(model).cuda()\n"
            "    torch.cuda.empty_cache()\n    return pipe\n\n\ndef get_pipe(model):\n    global _PIPE\n"
            "    if _PIPE is None:\n        _PIPE = build_pipe(model)\n    return _PIPE\n\n\n"
            "def free_pipe():\n    global _PIPE\n    _PIPE = None\n\n\ndef train(model, loader, optimizer):\n"
            "    for batch in loader:\n        loss = model(batch.cuda()).mean()\n        loss.backward()\n"
            "        optimizer.step()\n        optimizer.zero_grad()\n        pipe = get_pipe(model)\n"
            "        pipe(batch)\n        free_pipe()\n"
        ),
        # ... but a local name tested for None is an argument's default, filled on every call
        Invalid(
            "import torch\n\n_ENGINE = None\n\n\ndef build_engine(model):\n    engine = compile_engine(model)\n"
            "    torch.cuda.empty_cache()\n    return engine\n\n\n"
            "def get_engine(model, engine=None):\n    if engine is None:\n        engine = build_engine(model)\n"
            "    return engine\n\n\ndef train(model, loader, optimizer):\n    for batch in loader:\n"
            "        engine = get_engine(model)\n        loss = model(batch).mean()\n        loss.backward()\n"
            "        optimizer.step()\n        optimizer.zero_grad()\n"
        ),
        # a pipeline's settings bound every step; the pipeline itself runs every 500 steps
        Invalid(
            "import functools\nimport torch\nfor step, batch in enumerate(loader):\n    model(batch.cuda()).sum().backward()\n"
            "    opt.step()\n    torch.cuda.empty_cache()\n    sample = functools.partial(pipeline, num_inference_steps=30)\n"
            "    if step % 500 == 0:\n        sample(prompt)\n",
            "import functools\nimport torch\nfor step, batch in enumerate(loader):\n    model(batch.cuda()).sum().backward()\n"
            "    opt.step()\n    sample = functools.partial(pipeline, num_inference_steps=30)\n"
            "    if step % 500 == 0:\n        sample(prompt)\n",
        ),
        # settings gathered for a pipeline every step; the pipeline runs every 500 steps
        Invalid(
            "import torch\nfor step, batch in enumerate(loader):\n    model(batch.cuda()).sum().backward()\n    opt.step()\n"
            "    torch.cuda.empty_cache()\n    sample_kwargs = dict(num_inference_steps=30)\n    if step % 500 == 0:\n"
            "        pipeline(prompt, **sample_kwargs)\n",
            "import torch\nfor step, batch in enumerate(loader):\n    model(batch.cuda()).sum().backward()\n    opt.step()\n"
            "    sample_kwargs = dict(num_inference_steps=30)\n    if step % 500 == 0:\n"
            "        pipeline(prompt, **sample_kwargs)\n",
        ),
        # returning early on one step in N leaves the other steps emptying the cache
        Invalid(
            "import torch\n\ndef tidy(step):\n    if step % 100 == 0:\n        return\n    torch.cuda.empty_cache()\n\n"
            "for step, x in enumerate(loader):\n    model(x.cuda()).sum().backward()\n    opt.step()\n    tidy(step)\n",
            "import torch\n\ndef tidy(step):\n    if step % 100 == 0:\n        return\n\n"
            "for step, x in enumerate(loader):\n    model(x.cuda()).sum().backward()\n    opt.step()\n    tidy(step)\n",
        ),
        Invalid(
            "import torch\nfor x, y in loader:\n    loss = criterion(model(x), y)\n    loss.backward()\n"
            "    optimizer.step()\n    torch.cuda.empty_cache()\n",
            "import torch\nfor x, y in loader:\n    loss = criterion(model(x), y)\n    loss.backward()\n"
            "    optimizer.step()\n",
        ),
        # under a device check, in a step helper
        Invalid(
            "import torch\n\ndef train_step(model, x):\n    loss = model(x).sum()\n    loss.backward()\n"
            "    if torch.cuda.is_available():\n        torch.cuda.empty_cache()\n    return loss\n\n"
            "for x in loader:\n    train_step(model, x)\n",
            "import torch\n\ndef train_step(model, x):\n    loss = model(x).sum()\n    loss.backward()\n"
            "    return loss\n\nfor x in loader:\n    train_step(model, x)\n",
        ),
        # in a module's forward: every step
        Invalid(
            "import torch\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        y = self.body(x)\n"
            "        torch.cuda.empty_cache()\n        return y\n",
            "import torch\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        y = self.body(x)\n"
            "        return y\n",
        ),
        # a class that takes the name of the base it derives from is that base's kind still
        Invalid(
            "import torch\nfrom torch.nn import Module\n\nclass Module(Module):\n    def forward(self, x):\n"
            "        torch.cuda.empty_cache()\n        return x\n",
            "import torch\nfrom torch.nn import Module\n\nclass Module(Module):\n    def forward(self, x):\n"
            "        return x\n",
        ),
        # a SimulEval agent's hooks run on every read or write action
        Invalid(
            "import torch\nfrom simuleval.agents import TextAgent\nclass Agent(TextAgent):\n"
            "    def update_states_read(self, states):\n        self.encode(states)\n\n"
            "    def encode(self, states):\n        states.encoder_states = self.model.encoder(states.source)\n"
            "        torch.cuda.empty_cache()\n",
            "import torch\nfrom simuleval.agents import TextAgent\nclass Agent(TextAgent):\n"
            "    def update_states_read(self, states):\n        self.encode(states)\n\n"
            "    def encode(self, states):\n        states.encoder_states = self.model.encoder(states.source)\n",
        ),
        # a helper that only empties the cache, called every step: the call goes, the helper stays
        Invalid(
            "import torch\n\ndef free():\n    if torch.cuda.is_available():\n        torch.cuda.empty_cache()\n\n"
            "for x in loader:\n    model(x).sum().backward()\n    opt.step()\n    free()\nfree()\n",
            "import torch\n\ndef free():\n    if torch.cuda.is_available():\n        torch.cuda.empty_cache()\n\n"
            "for x in loader:\n    model(x).sum().backward()\n    opt.step()\nfree()\n",
        ),
        # `del` then empty_cache as the step's last statement: only the next step follows
        Invalid(
            "import torch\nfor x, y in loader:\n    out = model(x.cuda())\n    loss = criterion(out, y.cuda())\n"
            "    loss.backward()\n    optimizer.step()\n    optimizer.zero_grad()\n    del out, loss\n"
            "    torch.cuda.empty_cache()\n",
            "import torch\nfor x, y in loader:\n    out = model(x.cuda())\n    loss = criterion(out, y.cuda())\n"
            "    loss.backward()\n    optimizer.step()\n    optimizer.zero_grad()\n    del out, loss\n",
        ),
        # under a device test, in a loop whose data is named `inputs`: every step still
        Invalid(
            "import torch\nfor inputs in loader:\n    model(inputs.cuda()).sum().backward()\n    opt.step()\n"
            "    if torch.cuda.is_available():\n        torch.cuda.empty_cache()\n",
            "import torch\nfor inputs in loader:\n    model(inputs.cuda()).sum().backward()\n    opt.step()\n",
        ),
        # a tiled sampler: the loop over views runs the UNet, but each timestep is the step
        Invalid(
            "import torch\n\nclass Tiles:\n    def merge(self, outs):\n        merged = outs.mean(0)\n"
            "        torch.cuda.empty_cache()\n        return merged\n\n"
            "class Pipeline:\n    def __init__(self, unet):\n        self.unet = unet\n        self.tiles = Tiles()\n\n"
            "    def __call__(self, latents, views):\n"
            "        for i, t in enumerate(self.scheduler.timesteps):\n            grid = []\n"
            "            for view in views:\n                grid.append(self.unet(latents[view], t))\n"
            "            latents = self.tiles.merge(torch.stack(grid))\n        return latents\n",
            "import torch\n\nclass Tiles:\n    def merge(self, outs):\n        merged = outs.mean(0)\n"
            "        return merged\n\n"
            "class Pipeline:\n    def __init__(self, unet):\n        self.unet = unet\n        self.tiles = Tiles()\n\n"
            "    def __call__(self, latents, views):\n"
            "        for i, t in enumerate(self.scheduler.timesteps):\n            grid = []\n"
            "            for view in views:\n                grid.append(self.unet(latents[view], t))\n"
            "            latents = self.tiles.merge(torch.stack(grid))\n        return latents\n",
        ),
        # under a flag of the settings: it holds alike on every step
        Invalid(
            "import torch\nfor step, batch in enumerate(loader):\n    logits = model(batch)\n"
            "    if self.args.batch_eval_metrics:\n        metrics(logits)\n        del logits\n"
            "        torch.cuda.empty_cache()\n",
            "import torch\nfor step, batch in enumerate(loader):\n    logits = model(batch)\n"
            "    if self.args.batch_eval_metrics:\n        metrics(logits)\n        del logits\n",
        ),
        # a per-step call beside an OOM handler's and an evaluation's: no staged plan
        Invalid(
            "import torch\n\ndef train(loader):\n    for x in loader:\n        try:\n"
            "            model(x).sum().backward()\n            opt.step()\n"
            "        except torch.cuda.OutOfMemoryError:\n            torch.cuda.empty_cache()\n            continue\n"
            "        torch.cuda.empty_cache()\n\ndef evaluate(loader):\n    with torch.no_grad():\n"
            "        for x in loader:\n            model(x)\n    torch.cuda.empty_cache()\n",
            "import torch\n\ndef train(loader):\n    for x in loader:\n        try:\n"
            "            model(x).sum().backward()\n            opt.step()\n"
            "        except torch.cuda.OutOfMemoryError:\n            torch.cuda.empty_cache()\n            continue\n"
            "\ndef evaluate(loader):\n    with torch.no_grad():\n"
            "        for x in loader:\n            model(x)\n    torch.cuda.empty_cache()\n",
        ),
        # a device-picking helper's own calls are not places of a plan: its call every step is reported
        Invalid(
            "import torch\n\ndef empty_cache():\n    if is_torch_npu_available():\n        torch.npu.empty_cache()\n"
            "    else:\n        torch.cuda.empty_cache()\n\ndef train(loader):\n    for x in loader:\n"
            "        model(x).sum().backward()\n        opt.step()\n        empty_cache()\n",
            "import torch\n\ndef empty_cache():\n    if is_torch_npu_available():\n        torch.npu.empty_cache()\n"
            "    else:\n        torch.cuda.empty_cache()\n\ndef train(loader):\n    for x in loader:\n"
            "        model(x).sum().backward()\n        opt.step()\n",
        ),
        # under the instance's switch for one loss: every step of a run that uses it
        Invalid(
            "import torch\nfrom transformers import Trainer\n\nclass Distiller(Trainer):\n"
            "    def compute_loss(self, model, inputs, return_outputs=False):\n        loss = model(**inputs).loss\n"
            "        if self.use_liger_loss:\n            torch.cuda.empty_cache()\n        return loss\n",
            "import torch\nfrom transformers import Trainer\n\nclass Distiller(Trainer):\n"
            "    def compute_loss(self, model, inputs, return_outputs=False):\n        loss = model(**inputs).loss\n"
            "        if self.use_liger_loss:\n            pass\n        return loss\n",
        ),
        # `del` then empty_cache, then only the returns of an HF Trainer's compute_loss
        Invalid(
            "import torch\nfrom transformers import Trainer\n\nclass Distiller(Trainer):\n"
            "    def compute_loss(self, model, inputs, return_outputs=False):\n        hidden = model(**inputs)\n"
            "        loss = self.loss_fn(hidden)\n        del hidden\n        torch.cuda.empty_cache()\n"
            "        if return_outputs:\n            return loss, Output(loss=loss)\n        else:\n            return loss\n",
            "import torch\nfrom transformers import Trainer\n\nclass Distiller(Trainer):\n"
            "    def compute_loss(self, model, inputs, return_outputs=False):\n        hidden = model(**inputs)\n"
            "        loss = self.loss_fn(hidden)\n        del hidden\n"
            "        if return_outputs:\n            return loss, Output(loss=loss)\n        else:\n            return loss\n",
        ),
        # ... followed by a log line and a counter: the step's end still
        Invalid(
            "import torch\nfor step, (x, y) in enumerate(loader):\n    loss = criterion(model(x.cuda()), y.cuda())\n"
            "    loss.backward()\n    optimizer.step()\n    del loss\n    torch.cuda.empty_cache()\n"
            "    logger.info(\"step %d done\", step)\n    step += 1\n",
            "import torch\nfor step, (x, y) in enumerate(loader):\n    loss = criterion(model(x.cuda()), y.cuda())\n"
            "    loss.backward()\n    optimizer.step()\n    del loss\n"
            "    logger.info(\"step %d done\", step)\n    step += 1\n",
        ),
    )

    def __init__(self, context) -> None:  # type: ignore[no-untyped-def]
        super().__init__(context)
        self._staging: Optional[bool] = None  # the module's calls are a staged plan (`_staged`)

    def visit_Call(self, node: cst.Call) -> None:
        facts = self.facts
        shown = self._empties(node)
        if shown is None:
            return
        if self._between_phases(node) or self._beside_generation(node) or self._timed(node) or self._staged():
            return
        often = facts.per_step(node)
        if often is None or self._guarded(node):
            return
        where = "several times per step" if often == INNER else "on every step"
        self.report(node, (
            f"`{shown}` runs {where}: it hands every cached block back to the driver, so the "
            f"next step must allocate (and the free must wait for) all its memory again - slower, and no lower "
            f"a peak, since the allocator frees its cache by itself before it runs out; remove it"),
            self._fix(node, shown))

    def _staged(self) -> bool:
        """The module empties the cache in `_STAGED` places or more: `torch.cuda.empty_cache()`,
        or a call of a helper of this module that only empties it (not the helper's own call,
        not in recovery from an out-of-memory error; the same count alone as in the project).
        More than a train and an evaluation path: a plan of memory staged by hand across a
        step's phases (an RL recipe's generation, reference, policy and backward), whose calls
        a maintainer keeps or drops together, not one by one."""
        if self._staging is None:
            self._staging = sum(1 for call in self.facts.scopes.calls if self._empties(call, project=False) is not None
                                and not self._recovers(call)) >= _STAGED
        return self._staging

    def _empties(self, node: cst.Call, project: bool = True) -> Optional[str]:
        """How the call is shown when it empties the cache where it is made: the call itself,
        or a call of a helper that only empties it (`project`: of another module too); None for
        another call, and for the call inside such a helper (reported where the helper is called)."""
        facts = self.facts
        if facts.names.call_name(node) in EMPTY_CACHE:
            function = facts.tree.function_of(node)
            if function is not None and facts.tree.scope_of(function) is facts.tree.module and \
                    only_empties_cache(function, facts.names.call_name):
                return None
            return f"{show(node.func)}()"
        if not node.args and self._calls_cache_helper(node, project):
            return cst.Module([]).code_for_node(node)
        return None

    def _calls_cache_helper(self, node: cst.Call, project: bool = True) -> bool:
        """`empty_cache()`, a function of this module or (`project`) another of the project that
        does nothing but empty the cache (memlint.analysis.cache)."""
        facts = self.facts
        target = facts.scopes.resolve(node)
        if target is not None:
            return facts.tree.scope_of(target) is facts.tree.module and \
                only_empties_cache(target, facts.names.call_name)
        if not project:
            return False
        dotted = facts.values.project_callee(node)
        return dotted is not None and facts.project.empties_cache(dotted)

    def _between_phases(self, node: cst.Call) -> bool:
        """`del logits; torch.cuda.empty_cache()`, then more of the step's work in the same
        block (`_works`): a large tensor let go and its memory handed back on purpose between
        the phases of a step, as RL trainers do (the reference model runs next). Not at a step's
        end (`del out, loss; torch.cuda.empty_cache()`, then a log line, a counter or nothing)."""
        tree = self.facts.tree
        statement = self._holder(node)
        if statement is None:
            return False
        body, position = tree.siblings(statement)
        before = body[position - 1] if position > 0 else None
        if type(before) is not cst.SimpleStatementLine or type(before.body[-1]) is not cst.Del:  # type: ignore[attr-defined]
            return False
        return any(_works(later) for later in body[position + 1:])

    def _beside_generation(self, node: cst.Call) -> bool:
        """The iteration (or, outside a loop, the function) that empties the cache also
        generates sequences on every run, not under a periodic test (`model.generate(...)`, a
        helper of this module that asks a model for one, or a method named `generate...` that
        calls any `generate`): between a generation,
        whose KV caches take memory in shapes no other phase reuses, and the forwards that
        follow, handing the blocks back is deliberate."""
        facts = self.facts
        loops = facts.tree.loops_around(node)
        scope = facts.tree.scope_of(node)
        if loops:  # the iteration it runs in
            calls = [call for call, _ in facts.calls.calls_in(loops[0].body, follow=False)]  # type: ignore[attr-defined]
        elif scope is not facts.tree.module:
            calls = facts.scopes.calls_of(scope)
        else:
            return False
        return any(not facts.steps.periodic(call) and self._generates(call) for call in calls)

    def _timed(self, node: cst.Call) -> bool:
        """The loop around the call trains nothing and times its iterations with CUDA events
        (`start = torch.cuda.Event(enable_timing=True)`, ..., `start.elapsed_time(end)`): a
        benchmark, which empties the cache so that each measurement starts alike (KAIR's
        challenge script, per test image)."""
        facts = self.facts
        loops = facts.tree.loops_around(node)
        if not loops or facts.roles.backwards_in(loops[0]):
            return False
        return any(type(call.func) is cst.Attribute and call.func.attr.value == "elapsed_time" and  # type: ignore[attr-defined]
                   facts.scopes.imported_class_of(call.func.value, facts.names.absolute_name)  # type: ignore[attr-defined]
                   in ("torch.cuda.Event", "torch.Event")
                   for call, _ in facts.calls.calls_in(loops[0].body, follow=False))  # type: ignore[attr-defined]

    def _generates(self, call: cst.Call) -> bool:
        facts = self.facts
        if facts.roles.is_generate(call) or _samples(call):
            return True
        target = facts.scopes.resolve(call)
        return target is not None and any(
            facts.roles.is_generate(inner) or
            target.name.value.startswith("generate") and last_part(dotted_name(inner.func)) == "generate"
            for inner in facts.scopes.calls_of(target))

    def _guarded(self, node: cst.Call) -> bool:
        """In an except or finally block, a try that catches OOM errors, or under a condition
        that is not a device check nor a flag of the settings, which holds alike on every
        step (between the call and its loop or function)."""
        if self._recovers(node):
            return True
        child: cst.CSTNode = node
        for ancestor in self.facts.tree.ancestors(node):
            if type(ancestor) in (cst.FunctionDef, cst.Lambda, cst.ClassDef, cst.For, cst.While):
                if type(ancestor) in (cst.For, cst.While) and child is not ancestor.body:
                    return True  # in a loop's else, or its header
                if not type(ancestor) in (cst.For, cst.While):
                    return False
            if type(ancestor) is cst.If and child is not ancestor.test and \
                    not picks_device(ancestor.test) and not a_setting(ancestor.test):
                return True
            if type(ancestor) is cst.IfExp:
                return True
            child = ancestor
        return False

    def _recovers(self, node: cst.Call) -> bool:
        """In an except or finally block, or a try that catches OOM errors, within its function:
        recovery after an out-of-memory error."""
        child: cst.CSTNode = node
        for ancestor in self.facts.tree.ancestors(node):
            if type(ancestor) in NEW_SCOPES:
                return False
            if type(ancestor) in (cst.ExceptHandler, cst.ExceptStarHandler, cst.Finally):
                return True
            if type(ancestor) in (cst.Try, cst.TryStar) and child is ancestor.body and any(
                    handler.type is None or _CATCHES_OOM.search(cst.Module([]).code_for_node(handler.type))
                    for handler in ancestor.handlers):
                return True
            child = ancestor
        return False

    def _holder(self, node: cst.Call) -> Optional[cst.CSTNode]:
        """The statement that holds the call: its own line, or the `if` around it that only
        picks the device and holds nothing else (`if torch.cuda.is_available():
        torch.cuda.empty_cache()`, on one line or two)."""
        tree = self.facts.tree
        statement = tree.statement_of(node)
        block = tree.parent(statement) if statement is not None else tree.parent(tree.parent(node))
        body = getattr(block, "body", ())
        alone = type(body) in (list, tuple) and len(body) == 1 and \
            (statement is not None or type(block) is cst.SimpleStatementSuite)  # (not a lambda's conditional expression)
        owner = tree.parent(block) if block is not None else None
        if alone and type(owner) is cst.If and owner.orelse is None and owner.body is block and \
                picks_device(owner.test):  # type: ignore[attr-defined]
            return owner
        return statement

    def _fix(self, node: cst.Call, shown: str) -> Optional[Fix]:
        tree = self.facts.tree
        if tree.statement_of(node) is None:
            return None
        target = self._holder(node)
        body, _ = tree.siblings(target)  # type: ignore[arg-type]
        if len(body) > 1:
            return Fix((Remove(target),), Safety.SAFE, f"remove `{shown}`")  # type: ignore[arg-type]
        return Fix((Replace(target, cst.parse_statement("pass")),), Safety.SAFE, f"remove `{shown}`")  # type: ignore[arg-type]


# Calls that log or count, not work of the step: what may follow `del ...; empty_cache()` at its end.
_BOOKKEEPING = frozenset({"print", "info", "debug", "warning", "log", "log_dict", "update", "set_postfix",
                          "set_description", "write", "add_scalar", "collect", "flush"})


def _works(statement: cst.CSTNode) -> bool:
    """The statement does some of the step's work: it binds or stores a computed value
    (`ref = ref_model(x)`, `masks[i] = ...`) or calls something other than a log, a progress
    bar or a collector. Not a `return`, a `continue`, a counter (`step += 1`) or a log line."""
    if _returns(statement):
        return False  # what it returns was computed before
    for node in walk(statement):
        kind = type(node)
        if kind is cst.Assign and any(type(n) is cst.Call for n in walk(node.value)):  # type: ignore[attr-defined]
            return True
        if kind is cst.Assign and any(type(t.target) is cst.Subscript for t in node.targets):  # type: ignore[attr-defined]
            return True
        if kind is cst.Call and last_part(dotted_name(node.func)) not in _BOOKKEEPING:  # type: ignore[attr-defined]
            return True
    return False


def _returns(statement: Optional[cst.CSTNode]) -> bool:
    """A `return`, `continue` or `break` of what was computed before, or an `if` whose
    branches (its `else` too, where it has one) are each one (`if return_outputs: return loss,
    Output(loss=loss)` / `else: return loss`): the step's end. Not a return that runs more of
    the step (`return self.distill(self.teacher(**inputs), loss)`): only outputs are built
    there, by classes (`ModelOutput(...)`), or values read (`loss.item()`, `float(loss)`)."""
    kind = type(statement)
    if kind is cst.SimpleStatementLine or kind is cst.SimpleStatementSuite:
        small = statement.body[0]  # type: ignore[union-attr]
        return type(small) in (cst.Return, cst.Continue, cst.Break) and not any(
            type(node) is cst.Call and _runs_more(last_part(dotted_name(node.func)))  # type: ignore[attr-defined]
            for node in walk(small))
    if kind is cst.If or kind is cst.Else:
        body = statement.body  # type: ignore[union-attr]
        lines = body.body if type(body) is cst.IndentedBlock else [body]
        return len(lines) == 1 and _returns(lines[0]) and (
            kind is cst.Else or statement.orelse is None or _returns(statement.orelse))  # type: ignore[union-attr]
    return False


def _runs_more(called: str) -> bool:
    """A call in a return that runs more of the step: not a class building the output
    (`ModelOutput(...)`), nor a read of a value (`_READS`)."""
    return not called[:1].isupper() and called not in _READS
