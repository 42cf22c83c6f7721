"""The trainer on a real accelerator, in one run and one table: ours against TRL and transformers.

    bench/gpu_check.sh --device cuda:0            # on the GPU machine (installs from bench/wheelhouse)
    python bench/gpu_check.py --device cpu --small   # every part on CPU, tiny shapes: proves the script

Parts, each a row (or two) of the table; a part that fails becomes a FAILED row and the rest run:
1. generation: completion tokens/s of ours (trainer/generation.py `sample`) against transformers'
   `generate` (do_sample, top_k 0, num_return_sequences G), same model, prompts, G and length,
   both under the trainer's precision (TrainerConfig.dtype "auto": bf16 autocast on a bf16 GPU).
2. GRPO step: seconds per step (generate + reward + one update) and peak accelerator memory of
   ours (TrainerPolicy) against TRL's GRPOTrainer on the same model, questions, G, length, lr,
   loss (token-level, clip 0.2 / 0.28, beta 0) and precision (TRL: bf16=True, fp32 weights), and
   without gradient checkpointing (TRL's default is on; ours never checkpoints).
   Rewards are random numbers (seeded): a random model scores 0 everywhere, which would leave no
   group with an advantage and so no update to time.
3. bf16 drift: one AdamW step at lr 1e-6 moves the fp32 master weights under bf16 autocast and not
   weights stored in bf16 (trainer/precision.py `small_step`), and the next-token loss under
   autocast against fp32.
4. `swarmp2p train --device D` with the tiny model for a few steps (a subprocess, as a user runs it).
5. Two `swarmp2p node --device D` processes on one device (separate data dirs, the second
   bootstrapping from the first) for a few rounds: did each train on the other's rollouts?

The model of parts 1-3 is built here from a config with random weights (no hub): Qwen2.5-0.5B's
shape (hidden 896, 24 layers, 14 heads / 2 KV heads, MLP 4864, vocab 151,936, tied embeddings) as
a Llama (no q/k/v bias; transformers' Auto classes load a Llama folder with any tokenizer), with a
word-level tokenizer of as many tokens ("t3", "t4", ...), so that every sampled id decodes to a word
and the text tokenizes back to the same ids. `--small` shrinks it (and every batch) for CPU.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing it

QWEN25_05B = dict(
    vocab_size=151_936,
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    max_position_embeddings=32_768,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
)
SMALL = dict(
    vocab_size=2048,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=2048,
    tie_word_embeddings=True,
)
SPECIALS = ("<pad>", "<eos>", "<unk>")
DRIFT_LR = 1e-6


class Row:
    """One line of the table: what, ours, the reference, ours / reference, and a verdict."""

    def __init__(self, what: str, ours: str, reference: str = "", ratio: str = "", verdict: str = "") -> None:
        self.what, self.ours, self.reference, self.ratio, self.verdict = what, ours, reference, ratio, verdict

    def as_dict(self) -> dict[str, str]:
        return dict(
            what=self.what, ours=self.ours, reference=self.reference, ratio=self.ratio, verdict=self.verdict
        )


def synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def reset_peak(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(device)


def peak_gib(device: str) -> float | None:
    """Peak accelerator memory allocated since the last reset_peak; None on CPU (not measured)."""
    import torch

    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated(device) / 2**30
    return None


def release(device: str) -> None:
    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def build_model(folder: Path, shape: dict[str, Any], device: str, seed: int = 0) -> int:
    """Save a random-weight Llama of `shape` and its word-level tokenizer to `folder`; its size."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {name: index for index, name in enumerate(SPECIALS)}
    vocab.update({f"t{index}": index for index in range(len(SPECIALS), shape["vocab_size"])})
    words = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=words, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )
    tokenizer.padding_side = "left"  # TRL and our packing both pad prompts on the left
    config = LlamaConfig(**shape, pad_token_id=0, eos_token_id=1, bos_token_id=1)
    torch.manual_seed(seed)
    # Initialise on the device: 0.5B parameters initialise in seconds there, minutes on a CPU.
    with torch.device(device):
        model = LlamaForCausalLM(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    size = sum(p.numel() for p in model.parameters())
    del model
    release(device)
    return size


def trainer_config(args: argparse.Namespace, folder: Path, data_dir: Path) -> Any:
    from trainer.config import TrainerConfig

    return TrainerConfig(
        model=str(folder),
        data_dir=str(data_dir),
        device=args.device,
        dtype=args.dtype,
        threads=args.threads,
        tasks=("basic_arithmetic",),
        num_generations=args.generations,
        max_new_tokens=args.tokens,
        temperature=1.0,
        lr=DRIFT_LR,
        beta=0.0,
        loss_aggregation="token",
        clip_eps_low=0.2,
        clip_eps_high=0.28,
        seed=0,
    )


def completion_length(row: list[int], eos_id: int) -> int:
    return row.index(eos_id) + 1 if eos_id in row else len(row)


def part_generation(args: argparse.Namespace, policy: Any, questions: list[Any]) -> list[Row]:
    """Ours vs transformers' generate, same prompts, G, length and precision (module doc, 1)."""
    import torch

    from trainer.generation import sample

    model, tokenizer, device = policy.model, policy.tokenizer, policy.device
    prompts = [policy.prompt_ids(ref) for ref in questions]
    eos, pad, g, tokens = tokenizer.eos_token_id, tokenizer.pad_token_id, args.generations, args.tokens
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    model.eval()

    def ours(seed: int) -> list[list[int]]:
        return sample(model, prompts, g, tokens, 1.0, eos, pad, torch.Generator().manual_seed(seed))

    def hf(seed: int) -> list[list[int]]:
        torch.manual_seed(seed)
        with torch.no_grad():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                max_new_tokens=tokens,
                num_return_sequences=g,
                pad_token_id=pad,
                eos_token_id=eos,
            )
        return out[:, width:].tolist()

    rates: dict[str, list[float]] = {"ours": [], "generate": []}
    for repeat in range(args.repeats + 1):  # the first pass warms kernels and allocators up
        for name, run in (("ours", ours), ("generate", hf)):
            synchronize(device)
            started = time.perf_counter()
            with policy.precision.autocast():
                rows = run(100 + repeat)
            synchronize(device)
            seconds = time.perf_counter() - started
            if repeat:
                rates[name].append(sum(completion_length(list(r), eos) for r in rows) / seconds)
    mine, theirs = statistics.median(rates["ours"]), statistics.median(rates["generate"])
    shape = f"{len(prompts)} prompts x G={g}, {tokens} tokens"
    return [
        Row(
            f"generation tokens/s ({shape}; vs HF generate)",
            f"{mine:.0f}",
            f"{theirs:.0f}",
            f"{mine / theirs:.2f}x",
            "faster" if mine >= theirs else "slower",
        )
    ]


def random_rewards(groups: list[Any], rng: random.Random) -> list[Any]:
    from protocol.messages import Completion, QuestionGroup

    return [
        QuestionGroup(g.question, tuple(Completion(c.text, rng.random()) for c in g.completions))
        for g in groups
    ]


def part_ours_step(
    args: argparse.Namespace, policy: Any, batches: list[list[Any]]
) -> tuple[list[float], Any]:
    rng = random.Random(7)
    times = []
    synchronize(policy.device)
    reset_peak(policy.device)
    for batch in batches:
        started = time.perf_counter()
        groups = random_rewards(policy.generate(batch), rng)
        metrics = policy.train(groups)
        synchronize(policy.device)
        times.append(time.perf_counter() - started)
        if metrics.get("updated") != 1.0:
            raise RuntimeError(f"our step did not update: {metrics}")
    return times[args.skip :], peak_gib(policy.device)


def part_trl_step(
    args: argparse.Namespace, folder: Path, prompts: list[str], work: Path, autocast: bool
) -> tuple[list[float], Any]:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    device = args.device
    rng = random.Random(7)

    def reward(prompts: list[str], completions: list[str], **_kwargs: Any) -> list[float]:
        return [rng.random() for _ in completions]

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self._started = 0.0

        def on_step_begin(self, *_args: Any, **_kwargs: Any) -> None:
            synchronize(device)
            self._started = time.perf_counter()

        def on_step_end(self, *_args: Any, **_kwargs: Any) -> None:
            synchronize(device)
            self.times.append(time.perf_counter() - self._started)

    if device.startswith("cuda") and ":" in device:
        torch.cuda.set_device(device)  # the Trainer puts the model on the current CUDA device
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    timer = StepTimer()
    trl_args = GRPOConfig(
        output_dir=str(work / "trl"),
        per_device_train_batch_size=args.questions * args.generations,
        num_generations=args.generations,
        max_completion_length=args.tokens,
        temperature=1.0,
        learning_rate=DRIFT_LR,
        beta=0.0,
        epsilon=0.2,
        epsilon_high=0.28,
        loss_type="dapo",
        # TRL turns gradient checkpointing on by default; ours does not checkpoint, and the row
        # compares the same computation (trading time for memory is a separate choice).
        gradient_checkpointing=False,
        max_steps=len(prompts) // args.questions,
        bf16=autocast,
        use_cpu=device == "cpu",
        report_to=[],
        logging_strategy="no",
        save_strategy="no",
        shuffle_dataset=False,
        seed=0,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=trl_args,
        processing_class=tokenizer,
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        callbacks=[timer],
    )
    synchronize(device)
    reset_peak(device)
    trainer.train()
    peak = peak_gib(device)
    del trainer, model
    release(device)
    return timer.times[args.skip :], peak


def part_grpo(args: argparse.Namespace, folder: Path, work: Path) -> list[Row]:
    """Parts 1 and 2: generation and the GRPO step, ours against the references (module doc)."""
    from trainer.policy import TrainerPolicy

    policy = TrainerPolicy(trainer_config(args, folder, work / "ours"))
    rng = random.Random(0)
    batches = [policy.registry.sample(rng, args.questions, 0) for _ in range(args.steps + args.skip)]
    rows = guarded("generation", functools.partial(part_generation, args, policy, batches[0]))
    autocast = policy.precision.autocast_bf16
    label = policy.precision.label
    try:
        ours_times, ours_peak = part_ours_step(args, policy, batches)
    except Exception as error:
        return [*rows, failed("GRPO step (ours)", error)]
    prompts = [policy.registry.question(ref)[0] for batch in batches for ref in batch]
    del policy
    release(args.device)
    try:
        trl_times, trl_peak = part_trl_step(args, folder, prompts, work, autocast)
    except Exception as error:
        trl_times, trl_peak = [], None
        rows.append(failed("GRPO step (TRL GRPOTrainer)", error))
    shape = f"{args.questions} questions x G={args.generations}, {args.tokens} tokens, {label}"
    mine = statistics.median(ours_times)
    theirs = statistics.median(trl_times) if trl_times else None
    rows.append(
        Row(
            f"GRPO step s, median of {len(ours_times)} ({shape}; vs TRL GRPOTrainer)",
            f"{mine:.3f}",
            "" if theirs is None else f"{theirs:.3f}",
            "" if theirs is None else f"{mine / theirs:.2f}x",
            "" if theirs is None else ("faster" if mine <= theirs else "slower"),
        )
    )
    if ours_peak is not None:
        rows.append(
            Row(
                "GRPO step peak memory GiB (weights, AdamW state, activations; vs TRL)",
                f"{ours_peak:.2f}",
                "" if trl_peak is None else f"{trl_peak:.2f}",
                "" if trl_peak is None else f"{ours_peak / trl_peak:.2f}x",
            )
        )
    else:
        rows.append(Row("GRPO step peak memory", "not measured on CPU"))
    return rows


def part_drift(args: argparse.Namespace, folder: Path) -> list[Row]:
    """Part 3: fp32 master weights under bf16 autocast vs weights stored in bf16 (module doc)."""
    import torch
    from transformers import AutoModelForCausalLM

    from trainer.device import probe, supports_bf16
    from trainer.grpo import completion_logps
    from trainer.precision import Precision, small_step

    device = args.device
    if device.startswith("cuda") and not supports_bf16(device, probe()):
        return [Row("bf16 drift", "skipped: this GPU has no bf16 tensor cores")]
    mixed = Precision(device, autocast_bf16=True)  # asked for on CPU too: the point is the numerics
    generator = torch.Generator().manual_seed(3)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(device)
    ids = torch.randint(3, model.config.vocab_size, (4, args.drift_tokens), generator=generator).to(device)
    mask = torch.ones_like(ids)
    with torch.no_grad():
        exact = -completion_logps(model, ids, mask, ids.size(1) - 1).mean().item()
        with mixed.autocast():
            approx = -completion_logps(model, ids, mask, ids.size(1) - 1).mean().item()
    fp32_master = small_step(model, ids, DRIFT_LR, mixed.autocast)
    del model
    release(device)
    stored_bf16 = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).to(device)
    bf16_weights = small_step(stored_bf16, ids, DRIFT_LR, mixed.autocast)
    del stored_bf16
    release(device)
    relative = abs(approx - exact) / abs(exact)
    ok = fp32_master.moved_share > 0.9 and bf16_weights.moved_share < 0.1
    return [
        Row(
            f"bf16 drift: weights one AdamW step at lr {DRIFT_LR:g} moved (fp32 master vs bf16 weights)",
            f"{fp32_master.moved_share:.1%} of {fp32_master.trainable:,}",
            f"{bf16_weights.moved_share:.1%} of {bf16_weights.trainable:,}",
            "",
            "ok" if ok else "FAILED",
        ),
        Row(
            "bf16 drift: next-token loss under bf16 autocast vs fp32 (relative difference)",
            f"{approx:.5f}",
            f"{exact:.5f}",
            f"{relative:.2e}",
            "ok" if relative <= 0.01 else "FAILED (over 1%)",
        ),
    ]


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "swarmp2p.cli", *args]


def child_env(work: Path) -> dict[str, str]:
    # The tiny model's cache goes under the work folder: the run leaves nothing behind.
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return {**os.environ, "XDG_CACHE_HOME": str(work / "cache"), "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}


def tiny_lines(args: argparse.Namespace) -> str:
    """[trainer] lines of the tiny model parts 4 and 5 use: the default one (shipped, or built
    once), or under --small a smaller one pre-trained for fewer steps (seconds on a CPU, and
    still answering well enough that its groups have reward variance to train on)."""
    return "tiny_hidden_size = 64\ntiny_pretrain_steps = 150\n" if args.small else ""


def part_tiny(args: argparse.Namespace, work: Path) -> list[Row]:
    """The tiny model of parts 4 and 5, built (or copied from the shipped build) once here into
    the cache both children read, so that neither pays for it nor races the other."""
    import tomllib

    from trainer.config import TrainerConfig
    from trainer.model import model_folder

    fields = tomllib.loads(tiny_lines(args))
    config = TrainerConfig(model_cache=str(work / "cache" / "swarmp2p" / "models"), **fields)
    started = time.perf_counter()
    folder = Path(model_folder(config))
    params = json.loads((folder / "config.json").read_text())
    return [
        Row(
            "tiny model (parts 4-5)",
            f"{folder.name}: hidden {params['hidden_size']}, {params['num_hidden_layers']} layers",
            f"ready in {time.perf_counter() - started:.1f} s",
        )
    ]


def part_train(args: argparse.Namespace, work: Path) -> list[Row]:
    """Part 4: `swarmp2p train --device D` with the tiny model for a few steps."""
    config = work / "train.toml"
    config.write_text(
        f"[trainer]\nnum_generations = {args.generations}\nmax_new_tokens = {args.train_tokens}\n"
        + tiny_lines(args)
    )
    out = work / "train-out"
    command = cli(
        "train",
        *("--device", args.device, "--dtype", args.dtype, "--model", "tiny", "--config", str(config)),
        *("--steps", str(args.train_steps), "--questions", str(args.questions), "--eval-every", "0"),
        *("--no-select", "--fresh", "--data-dir", str(work / "train"), "--out", str(out)),
    )
    if args.threads:
        command += ["--threads", str(args.threads)]
    started = time.perf_counter()
    done = subprocess.run(
        command, capture_output=True, text=True, env=child_env(work), timeout=args.part_timeout
    )
    wall = time.perf_counter() - started
    log = done.stdout + done.stderr
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}: {log[-1500:]}")
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [m for m in metrics if "reward_mean" in m]
    where = next((line.strip() for line in log.splitlines() if "params on" in line), "")
    rewards = [m["reward_mean"] for m in steps]
    train_s = [m["seconds"] for m in steps if m.get("updated")]
    return [
        Row(
            f"swarmp2p train --device {args.device} --model tiny: {where}",
            f"{len(steps)} steps in {wall:.1f} s (update {statistics.mean(train_s) if train_s else 0:.3f} s)",
            f"reward {rewards[0]:.3f} -> {rewards[-1]:.3f}" if rewards else "",
            "",
            "ok" if len(steps) == args.train_steps else "FAILED",
        )
    ]


def part_peers(args: argparse.Namespace, work: Path) -> list[Row]:
    """Part 5: two nodes on one device exchange rollouts for a few rounds."""
    config = work / "peers.toml"
    config.write_text(
        f"[node]\nround_seconds = {args.round_seconds}\nhello_interval_s = 2.0\nquestions_per_round = 2\n"
        "n_local = 2\nn_external = 2\nmax_groups_per_peer = 2\n\n"
        f"[trainer]\nnum_generations = {args.generations}\nmax_new_tokens = {args.train_tokens}\n"
        f"eval_every = 0\nthreads = {args.threads}\n{tiny_lines(args)}"
    )
    env = child_env(work)
    processes: list[subprocess.Popen[bytes]] = []
    dirs = [work / "peer0", work / "peer1"]

    def start(data_dir: Path, extra: list[str]) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        log = (data_dir / "stdout.log").open("wb")
        command = cli("node", "--config", str(config), "--data-dir", str(data_dir), "--model", "tiny")
        command += ["--device", args.device, "--dtype", args.dtype, *extra]
        processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env))

    def info(data_dir: Path) -> dict[str, Any]:
        path = data_dir / "node.json"
        wait(
            lambda: path.exists() or any(p.poll() is not None for p in processes),
            120,
            f"{data_dir.name} start",
        )
        if not path.exists():
            raise RuntimeError(f"{data_dir.name} exited: {tail(data_dir)}")
        return json.loads(path.read_text())

    def rounds(data_dir: Path) -> list[dict[str, Any]]:
        path = data_dir / "rounds.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    started = time.perf_counter()
    try:
        start(dirs[0], [])
        first = info(dirs[0])
        start(dirs[1], ["--bootstrap", first["listen_addrs"][0]])
        second = info(dirs[1])
        ids = [first["peer_id"], second["peer_id"]]
        # rounds that both peers began after the second joined: a round's record is written at its end
        wait(lambda: all(len(rounds(d)) >= args.rounds + 1 for d in dirs), args.part_timeout, "the rounds")
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
    wall = time.perf_counter() - started
    rows = []
    for index, data_dir in enumerate(dirs):
        other = ids[1 - index]
        records = rounds(data_dir)
        completed = sum(1 for r in records if r.get("completed"))
        accepted = sum(1 for r in records if other in r.get("accepted_peers", []))
        trained = sum(1 for r in records if other in r.get("external_peers_trained_on", []))
        rows.append(
            Row(
                f"two peers on {args.device}: peer {index} rounds completed / took the other's batch / "
                f"trained on it ({wall:.0f} s)",
                f"{completed} / {accepted} / {trained} of {len(records)}",
                "",
                "",
                # Exchange is the check: a batch taken was received and re-scored. Training on it
                # also needs one of its groups to have an advantage, which a weak model (the
                # --small tiny one) often lacks for a few rounds.
                "FAILED" if not (completed and accepted) else "ok" if trained else "ok (no advantage)",
            )
        )
    return rows


def wait(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.5)


def tail(data_dir: Path) -> str:
    path = data_dir / "stdout.log"
    return path.read_text(errors="replace")[-1500:] if path.exists() else ""


def failed(what: str, error: BaseException) -> Row:
    text = str(error).strip().splitlines()
    return Row(what, "FAILED", "", "", f"{type(error).__name__}: {text[-1] if text else ''}"[:300])


def guarded(what: str, part: Callable[[], list[Row]]) -> list[Row]:
    """A part's rows, or one FAILED row (with the traceback on stderr): the other parts still run."""
    started = time.perf_counter()
    try:
        rows = part()
    except Exception as error:
        traceback.print_exc()
        rows = [failed(what, error)]
    print(f"[gpu_check] {what}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    parser.add_argument("--dtype", default="auto", help="TrainerConfig.dtype: auto, fp32 or bf16-autocast")
    parser.add_argument("--small", action="store_true", help="tiny shapes and batches, for CPU")
    parser.add_argument("--parts", default="grpo,drift,train,peers", help="comma-separated subset")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads for torch (0: all)")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--work", type=Path, default=None, help="work folder (default: a temporary one)")
    args = parser.parse_args()
    sizes = (
        dict(questions=2, generations=4, tokens=16, steps=2, skip=1, repeats=2, drift_tokens=24)
        if args.small
        else dict(questions=4, generations=8, tokens=128, steps=3, skip=1, repeats=3, drift_tokens=128)
    )
    for key, value in sizes.items():
        setattr(args, key, value)
    args.train_steps, args.train_tokens, args.rounds = 3, 32 if args.small else 48, 3
    args.round_seconds = 20.0 if args.device == "cpu" else 10.0
    args.part_timeout = 240.0

    import torch

    from trainer.device import describe, probe, resolve_device
    from trainer.model import configure_threads
    from trainer.precision import resolve_precision

    facts = probe()
    device = resolve_device(args.device, facts)
    args.device = device
    precision = resolve_precision(args.dtype, device, facts)
    if device == "cpu":
        from trainer.config import TrainerConfig

        configure_threads(TrainerConfig(threads=args.threads))
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    parts = set(args.parts.split(","))
    began = time.perf_counter()
    header = (
        f"{describe(device, facts)}, {precision.label}; torch {torch.__version__}, "
        f"{'small shapes' if args.small else 'Qwen2.5-0.5B shape'}; work folder {work}"
    )
    print(f"[gpu_check] {header}", file=sys.stderr, flush=True)
    rows: list[Row] = []
    folder = work / "model"
    if parts & {"grpo", "drift"}:

        def model_row() -> list[Row]:
            size = build_model(folder, SMALL if args.small else QWEN25_05B, device)
            return [Row("model (parts 1-3)", f"{size / 1e6:.1f}M params, random weights, built here")]

        rows += guarded("model", model_row)
    if "grpo" in parts and folder.exists():
        rows += guarded("generation and GRPO step", lambda: part_grpo(args, folder, work))
    if "drift" in parts and folder.exists():
        rows += guarded("bf16 drift", lambda: part_drift(args, folder))
    if parts & {"train", "peers"}:
        rows += guarded("tiny model", lambda: part_tiny(args, work))
    if "train" in parts:
        rows += guarded("swarmp2p train", lambda: part_train(args, work))
    if "peers" in parts:
        rows += guarded("two peers", lambda: part_peers(args, work))
    total = time.perf_counter() - began
    show(rows, header, total)
    if args.json is not None:
        args.json.write_text(
            json.dumps({"header": header, "seconds": total, "rows": [r.as_dict() for r in rows]}, indent=1)
        )
    if any("FAILED" in (row.ours + row.verdict) for row in rows):
        raise SystemExit(1)


def show(rows: list[Row], header: str, total: float) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"gpu_check: {header}", caption=f"{total:.0f} s in all", show_lines=True)
    for column in ("check", "ours", "reference", "ours / ref", "verdict"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(row.what, row.ours, row.reference, row.ratio, row.verdict)
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
