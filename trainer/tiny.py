"""The `tiny` model: a BPE tokenizer and a small Llama, built and pre-trained offline.

No model hub is reachable on the machines this runs on, so the default model is made here:
- the tokenizer is a BPE trained on questions and answers of the configured tasks (so the
  prompt's words compress to few tokens), with every digit its own token (merged multi-digit
  tokens would make arithmetic a lookup table over thousands of tokens);
- the model is a small Llama (a `qwen2` folder would make transformers 5 ignore our tokenizer),
  pre-trained with supervision on generated task items (trainer/pretrain.py) into a weak solver:
  it writes the answer format and gets a minority of held-out questions right, the starting
  point GRPO needs. `tiny_pretrain_steps = 0` gives the raw random initialisation.
The result is cached in `<model_cache>/tiny-<fingerprint>/` (default `<data_dir>/models`), keyed
by everything that shapes it.

The build of the default settings is shipped (`trainer/shipped/tiny-<fingerprint>/`, written by
`python scripts/ship_tiny.py --write` from this module's own build): a first start copies it
instead of pre-training for about four minutes, and every peer with the default settings runs the
same bytes. A peer that built it itself would not be certain to: float rounding in training
depends on the CPU's vector instructions and thread count. The copy is checked file by file
against the shipped SHA256SUMS; any other settings, or a shipped file that does not check, are
built here as before.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import attrs

from protocol.messages import QuestionRef
from trainer.config import TrainerConfig
from trainer.pretrain import Progress, pretrain
from trainer.rewards import ANSWER_CLOSE, ANSWER_OPEN
from trainer.tasks import ReasoningGymRegistry

log = logging.getLogger("trainer.tiny")

PAD, BOS, EOS = "<pad>", "<s>", "</s>"
SHIPPED_DIR = Path(__file__).parent / "shipped"
"""Pre-built tiny models that come with the package, one folder per fingerprint."""
CHECKSUMS = "SHA256SUMS"
_CORPUS_ITEMS_PER_TASK = 200
_CORPUS_SEED = 1234  # a dataset seed used only to build the tokenizer corpus
_FORMAT_VERSION = 4  # 4: held-out questions are cut by content key (trainer/content_keys.py)
# Pre-training cuts prompts and answers like the trainer's defaults; the answers of the tasks it
# is meant for are a few tokens, so these do not shape the model and stay out of its cache key.
_PRETRAIN_PROMPT_TOKENS = 384
_PRETRAIN_ANSWER_TOKENS = 48


@attrs.frozen
class TinySpec:
    """Everything that shapes the tiny model; its fingerprint names the cache folder."""

    tasks: tuple[str, ...]
    difficulty: int
    hidden: int
    layers: int
    vocab: int
    seed: int
    pretrain_steps: int
    pretrain_batch: int = 32
    pretrain_lr: float = 2e-3
    pretrain_noise: float = 0.0

    @classmethod
    def of(cls, config: TrainerConfig) -> TinySpec:
        return cls(
            tasks=tuple(config.tasks),
            difficulty=config.difficulty,
            hidden=config.tiny_hidden_size,
            layers=config.tiny_layers,
            vocab=config.tiny_vocab_size,
            seed=config.tiny_seed,
            pretrain_steps=config.tiny_pretrain_steps,
            pretrain_noise=config.tiny_pretrain_noise,
        )

    def fingerprint(self) -> str:
        blob = json.dumps({"v": _FORMAT_VERSION, **attrs.asdict(self)}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def corpus_questions(registry: ReasoningGymRegistry) -> Iterator[QuestionRef]:
    """The questions whose text the tokenizer is trained on: never a held-out one (by content key)."""
    for task in registry.task_names():
        for index in range(_CORPUS_ITEMS_PER_TASK):
            ref = QuestionRef(task, _CORPUS_SEED, index)
            if not registry.is_heldout(ref):
                yield ref


def _corpus(registry: ReasoningGymRegistry) -> Iterator[str]:
    for ref in corpus_questions(registry):
        prompt, answer = registry.question(ref)
        yield prompt
        yield f"{ANSWER_OPEN}{answer or ''}{ANSWER_CLOSE}"


def build_tiny(folder: Path, spec: TinySpec, progress: Progress | None = None) -> None:
    """Train the tokenizer, initialise and pre-train the model, save both to `folder` (atomically)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    registry = ReasoningGymRegistry(spec.tasks, difficulty=spec.difficulty)
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab,
        special_tokens=[PAD, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(registry), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token=PAD, bos_token=BOS, eos_token=EOS)
    # The answer tags are single tokens so that a tiny model can learn the format in few steps.
    fast.add_tokens([ANSWER_OPEN, ANSWER_CLOSE])
    fast.padding_side = "left"

    torch.manual_seed(spec.seed)
    heads = max(1, spec.hidden // 32)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=spec.hidden,
        intermediate_size=spec.hidden * 2,
        num_hidden_layers=spec.layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        pad_token_id=fast.pad_token_id,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
    )
    model = LlamaForCausalLM(config)
    if spec.pretrain_steps:
        pretrain(
            model,
            fast,
            registry,
            steps=spec.pretrain_steps,
            batch_size=spec.pretrain_batch,
            lr=spec.pretrain_lr,
            seed=spec.seed,
            max_prompt_tokens=_PRETRAIN_PROMPT_TOKENS,
            max_answer_tokens=_PRETRAIN_ANSWER_TOKENS,
            progress=progress,
            noise=spec.pretrain_noise,
        )
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tiny-", dir=folder.parent))
    try:
        model.save_pretrained(staging)
        fast.save_pretrained(staging)
        (staging / "tiny.json").write_text(json.dumps(attrs.asdict(spec), indent=1) + "\n")
        if folder.exists():  # another process won the race; theirs is identical
            return
        os.replace(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def tiny_folder(cache: Path, spec: TinySpec) -> Path:
    return cache / f"tiny-{spec.fingerprint()}"


def shipped_folder(spec: TinySpec) -> Path | None:
    """The shipped build of `spec`, if the package has one."""
    folder = tiny_folder(SHIPPED_DIR, spec)
    return folder if (folder / CHECKSUMS).is_file() else None


def checksums(folder: Path) -> dict[str, str]:
    """file name -> sha256 hex of every file of a built model folder (what SHA256SUMS lists)."""
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.iterdir())
        if path.is_file() and path.name != CHECKSUMS
    }


def read_checksums(folder: Path) -> dict[str, str]:
    """SHA256SUMS of `folder` ("<hex>  <name>" per line, as sha256sum writes it)."""
    listed: dict[str, str] = {}
    for line in (folder / CHECKSUMS).read_text().splitlines():
        digest, _, name = line.partition("  ")
        if name:
            listed[name] = digest
    return listed


def write_checksums(folder: Path) -> None:
    lines = [f"{digest}  {name}" for name, digest in checksums(folder).items()]
    (folder / CHECKSUMS).write_text("\n".join(lines) + "\n")


def _copy_shipped(source: Path, folder: Path) -> bool:
    """Copy the shipped build in `source` to `folder` (atomically), every file checked against
    SHA256SUMS first. False, having written nothing, when a file is missing or differs (a damaged
    install, or a checkout without the binary): the caller builds instead."""
    try:
        listed = read_checksums(source)
        # Only plain file names of this folder are read: SHA256SUMS naming "../x" is refused.
        not_plain = sorted(name for name in listed if Path(name).name != name or name.startswith("."))
        contents = {name: (source / name).read_bytes() for name in listed if name not in not_plain}
    except OSError as error:
        log.warning("shipped tiny model %s unreadable (%s): building it instead", source.name, error)
        return False
    bad = sorted(name for name, data in contents.items() if hashlib.sha256(data).hexdigest() != listed[name])
    bad += not_plain
    if not listed or bad:
        log.warning("shipped tiny model %s fails its checksums (%s): building it instead", source.name, bad)
        return False
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tiny-", dir=folder.parent))
    try:
        for name, data in contents.items():
            (staging / name).write_bytes(data)
        if not folder.exists():
            os.replace(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return True


def ensure_tiny(cache: Path, spec: TinySpec, progress: Progress | None = None) -> Path:
    """The cached tiny model folder in `cache`: on first use copied from the shipped build of the
    same settings when there is one, else built (and pre-trained).

    Builds are serialised by an OS lock per fingerprint: three nodes started together on one
    machine build the model once (the others wait, then load it) instead of three times."""
    import fcntl

    folder = tiny_folder(cache, spec)
    if (folder / "config.json").exists():
        return folder
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f".tiny-{spec.fingerprint()}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, even by a killed process
        if not (folder / "config.json").exists():
            shipped = shipped_folder(spec)
            if shipped is None or not _copy_shipped(shipped, folder):
                build_tiny(folder, spec, progress)
    return folder
