"""The `tiny` model: a BPE tokenizer and a small Llama built offline from task text in seconds.

No model hub is reachable on the machines this runs on, so the default model is made here:
the tokenizer is trained on questions and answers of the configured tasks (so prompts compress
well), and the model is a randomly initialised Llama (a `qwen2` folder would make transformers 5
ignore our tokenizer). The result is cached in `<data_dir>/models/tiny-<fingerprint>/`, keyed by
everything that shapes it, so every peer with the same settings builds the same model.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from protocol.messages import QuestionRef
from trainer.rewards import ANSWER_CLOSE, ANSWER_OPEN
from trainer.tasks import ReasoningGymRegistry

PAD, BOS, EOS = "<pad>", "<s>", "</s>"
_CORPUS_ITEMS_PER_TASK = 200
_CORPUS_SEED = 1234  # a dataset seed used only to build the tokenizer corpus
_FORMAT_VERSION = 1


def tiny_fingerprint(tasks: Sequence[str], hidden: int, layers: int, vocab: int, seed: int) -> str:
    blob = json.dumps(
        {
            "v": _FORMAT_VERSION,
            "tasks": list(tasks),
            "hidden": hidden,
            "layers": layers,
            "vocab": vocab,
            "seed": seed,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _corpus(registry: ReasoningGymRegistry) -> Iterator[str]:
    for task in registry.task_names():
        for index in range(_CORPUS_ITEMS_PER_TASK):
            prompt, answer = registry.question(QuestionRef(task, _CORPUS_SEED, index))
            yield prompt
            yield f"{ANSWER_OPEN}{answer or ''}{ANSWER_CLOSE}"


def build_tiny(folder: Path, tasks: Sequence[str], hidden: int, layers: int, vocab: int, seed: int) -> None:
    """Train the tokenizer, initialise the model and save both to `folder` (atomically)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    registry = ReasoningGymRegistry(tasks)
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=[PAD, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(registry), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token=PAD, bos_token=BOS, eos_token=EOS)
    # The answer tags are single tokens so that a tiny model can learn the format in few steps.
    fast.add_tokens([ANSWER_OPEN, ANSWER_CLOSE])
    fast.padding_side = "left"

    torch.manual_seed(seed)
    heads = max(1, hidden // 32)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        pad_token_id=fast.pad_token_id,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
    )
    model = LlamaForCausalLM(config)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tiny-", dir=folder.parent))
    try:
        model.save_pretrained(staging)
        fast.save_pretrained(staging)
        if folder.exists():  # another process won the race; theirs is identical
            return
        os.replace(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def ensure_tiny(
    data_dir: Path, tasks: Sequence[str], hidden: int, layers: int, vocab: int, seed: int
) -> Path:
    """The cached tiny model folder, built on first use."""
    folder = data_dir / "models" / f"tiny-{tiny_fingerprint(tasks, hidden, layers, vocab, seed)}"
    if not (folder / "config.json").exists():
        build_tiny(folder, tasks, hidden, layers, vocab, seed)
    return folder
