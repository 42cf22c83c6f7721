"""TrainerPolicy: the PolicyPort the node drives: generate, train, save, load (+ evaluate, cancel).

Over 600 lines: one model and optimizer that every PolicyPort call shares; its parts (GRPO, generation,
evaluation, precision) are modules of their own.

Synchronous and single-threaded by contract: the node calls it from one worker thread. `cancel()`
may be called from any thread; the running call stops at the next step boundary (a decoding step,
a micro-batch) by raising `Cancelled`, leaving the model and optimizer as they were before the
update (the optimizer only steps after every micro-batch has been processed).
"""

from __future__ import annotations

import copy
import json
import math
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from protocol.limits import MAX_COMPLETION_TOKENS
from protocol.logprobs import logprobs_error, pack_logprobs, unpack_logprobs
from protocol.messages import Completion, QuestionGroup, QuestionRef
from protocol.sampling import has_advantage
from trainer import checkpoint
from trainer.config import TrainerConfig
from trainer.generation import Cancelled, StopAtText, sample
from trainer.grpo import completion_logps, group_advantages, grpo_loss, pack
from trainer.model import configure_threads, load_model_and_tokenizer, resolve_device, resolve_precision
from trainer.rewards import ANSWER_CLOSE
from trainer.stage_items import generate_items
from trainer.tasks import ReasoningGymRegistry
from trainer.warmup import supervised_warmup

__all__ = ["Cancelled", "TrainerPolicy"]

_TOKEN_CACHE_SIZE = 8192
_EVAL_CHUNK = 64  # held-out completions per generation batch (bounds memory on large models)


class TrainerPolicy:
    def __init__(
        self,
        config: TrainerConfig,
        registry: ReasoningGymRegistry | None = None,
        log: Callable[[str], None] | None = None,
        build_progress: Callable[[int, int, float], None] | None = None,
    ) -> None:
        """`build_progress(step, total, loss)` follows the tiny model's pre-training on first use."""
        import torch

        self.config = config
        self.log = log or (lambda _message: None)
        self.registry = registry or ReasoningGymRegistry(
            config.tasks, config.weights, config.difficulty, config.format_reward
        )
        configure_threads(config)
        self.device = resolve_device(config.device)
        self.precision = resolve_precision(config.dtype, self.device)
        random.seed(config.seed)
        torch.manual_seed(config.seed)
        self.model, self.tokenizer = load_model_and_tokenizer(config, self.device, build_progress)
        self._stop = StopAtText.for_tokenizer(self.tokenizer, ANSWER_CLOSE) if config.stop_at_answer else None
        self.ref_model = None
        if config.beta > 0:
            self.ref_model = copy.deepcopy(self.model).eval()
            self.ref_model.requires_grad_(False)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=config.lr,
            weight_decay=config.weight_decay,
            foreach=self.device != "cpu" or None,
        )
        self.sampler = torch.Generator(device="cpu").manual_seed(config.seed)
        self.step = 0
        self.last_eval: dict[str, Any] | None = None
        self._cancel = threading.Event()
        self._prompt_cache: OrderedDict[QuestionRef, list[int]] = OrderedDict()
        self._completion_cache: OrderedDict[tuple[QuestionRef, str], list[int]] = OrderedDict()
        # The sampling log-probs of our own completions, beside their ids: the behaviour policy of
        # a completion that reaches train() without them (a caller that rebuilt the Completion).
        self._behaviour_cache: OrderedDict[tuple[QuestionRef, str], list[float]] = OrderedDict()
        self._use_chat_template = config.model != "tiny" and bool(
            getattr(self.tokenizer, "chat_template", None)
        )

    # --- cancellation ---
    cancellable = True
    """PolicyPort: `cancel()` stops a running call at its next step."""

    def cancel(self) -> None:
        """Ask the running (or next) call to stop at its next step boundary."""
        self._cancel.set()

    def reset_cancel(self) -> None:
        self._cancel.clear()

    def _check_cancel(self) -> None:
        if self._cancel.is_set():
            raise Cancelled("trainer cancelled")

    # --- tokens ---
    def prompt_ids(self, ref: QuestionRef) -> list[int]:
        cached = self._prompt_cache.get(ref)
        if cached is not None:
            return cached
        text, _answer = self.registry.question(ref)
        ids = self.text_prompt_ids(text)
        _remember(self._prompt_cache, ref, ids)
        return ids

    def text_prompt_ids(self, text: str) -> list[int]:
        """The prompt ids of a user message `text` (chat template when the model has one)."""
        if self._use_chat_template:
            ids = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
            )
            ids = list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
        else:
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        # keep the END of an over-long prompt: that is where the answer cue sits
        return list(ids[-self.config.max_prompt_tokens :])

    def completion_ids(self, ref: QuestionRef, text: str) -> list[int]:
        """Our own sampled ids when we generated `text`; else the text re-tokenized locally, with EOS
        appended when it is shorter than the generation limit (it ended rather than being cut)."""
        cached = self._completion_cache.get((ref, text))
        if cached is not None:
            return cached
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"][: self.config.max_new_tokens]
        if len(ids) < self.config.max_new_tokens:
            ids = [*ids, self.tokenizer.eos_token_id]
        return ids

    # --- PolicyPort ---
    def generate(self, questions: Sequence[QuestionRef]) -> list[QuestionGroup]:
        """G sampled completions per question, each scored by the local registry."""
        return self._generate(questions, self.config.num_generations, self.config.temperature)

    def _sample_ids(
        self,
        questions: Sequence[QuestionRef],
        repeats: int,
        temperature: float,
        generator: Any,
        top_p: float = 1.0,
        prompts: list[list[int]] | None = None,
        logprobs: list[list[float]] | None = None,
    ) -> list[list[int]]:
        """Sampled ids per (question, repeat); `logprobs`, when given, receives each one's
        per-token sampling log-probs (trainer/generation.py's `sample`)."""
        self._check_cancel()
        if prompts is None:
            prompts = [self.prompt_ids(ref) for ref in questions]
        self.model.eval()
        with self.precision.autocast():
            return sample(
                self.model,
                prompts,
                repeats,
                self.config.max_new_tokens,
                temperature,
                eos_id=self.tokenizer.eos_token_id,
                pad_id=self.tokenizer.pad_token_id,
                generator=generator,
                cancel=self._cancel,
                top_p=top_p,
                stop=self._stop,
                logprobs=logprobs,
            )

    def _generate(
        self, questions: Sequence[QuestionRef], repeats: int, temperature: float
    ) -> list[QuestionGroup]:
        self._check_cancel()
        if not questions:
            return []
        sampled_logps: list[list[float]] = []
        rows = self._sample_ids(questions, repeats, temperature, self.sampler, logprobs=sampled_logps)
        groups = []
        for q, ref in enumerate(questions):
            completions = []
            for row in range(q * repeats, (q + 1) * repeats):
                ids, logps = rows[row], sampled_logps[row]
                text = self.tokenizer.decode(ids, skip_special_tokens=True)
                _remember(self._completion_cache, (ref, text), ids)
                _remember(self._behaviour_cache, (ref, text), logps)
                # Past the wire's cap a completion goes without them: receivers then weigh it 1.
                packed = pack_logprobs(logps) if len(logps) <= MAX_COMPLETION_TOKENS else b""
                completions.append(
                    Completion(text=text, reward=self.registry.score(ref, text), logprobs=packed)
                )
            groups.append(QuestionGroup(question=ref, completions=tuple(completions)))
        return groups

    def behaviour_logps(
        self, ref: QuestionRef, completion: Completion, ids: Sequence[int]
    ) -> list[float] | None:
        """The log-probs `completion` was sampled with, aligned with `ids` (its tokens as train()
        sees them), or None when there are none to trust: none carried and none remembered, a
        vector that breaks the wire rules, or a length that does not match this tokenization (a
        peer whose tokenizer split the text otherwise). A vector one short of `ids` ending in EOS
        is the EOS appended after a stop text, which nobody sampled: that token keeps weight 1."""
        carried = completion.logprobs
        if not isinstance(carried, bytes):  # attrs does not enforce it; verification does, callers may not
            return None
        if carried:
            if logprobs_error(carried) is not None:
                return None
            values = list(unpack_logprobs(carried))
        else:
            values = self._behaviour_cache.get((ref, completion.text)) or []
        if not values:
            return None
        if len(values) == len(ids):
            return values
        if len(values) == len(ids) - 1 and ids and ids[-1] == self.tokenizer.eos_token_id:
            return values
        return None

    def generate_items(self, items: Sequence[Any]) -> list[QuestionGroup]:
        """G completions per item of a later stage of a multi-stage game, from the prompt its
        game's registry row words (trainer/stage_items.py)."""
        return generate_items(self, items)

    def sample_texts(self, refs: Sequence[QuestionRef], prompts: Sequence[str]) -> list[list[str]]:
        """`num_generations` sampled completion texts for each prompt text (`refs` name them to
        the sampler); stops at the next step when cancelled, like every other call."""
        self._check_cancel()
        if not prompts:
            return []
        repeats = self.config.num_generations
        ids = [self.text_prompt_ids(text) for text in prompts]
        rows = self._sample_ids(list(refs), repeats, self.config.temperature, self.sampler, prompts=ids)
        texts = [self.tokenizer.decode(row, skip_special_tokens=True) for row in rows]
        return [texts[index * repeats : (index + 1) * repeats] for index in range(len(prompts))]

    def train(self, groups: Sequence[QuestionGroup]) -> dict[str, float]:
        """One GRPO update on `groups` (local and external alike, all as text)."""
        import torch

        self._check_cancel()
        started = time.perf_counter()
        all_rewards = [c.reward for g in groups for c in g.completions]
        metrics: dict[str, float] = {
            "reward_mean": sum(all_rewards) / len(all_rewards) if all_rewards else 0.0,
            "groups_in": float(len(groups)),
        }
        # Held-out questions are never trained on, whoever asked them (trainer/tasks.py).
        trainable = [g for g in groups if not self.registry.is_heldout(g.question)]
        metrics["groups_heldout"] = float(len(groups) - len(trainable))
        # The sampler's own rule (protocol.sampling): a group it kept is never dropped here, and a
        # caller that did not sample (swarmp2p train) gets the same filter.
        used = [g for g in trainable if has_advantage(g)]
        metrics["groups_used"] = float(len(used))
        if not used:
            metrics.update(updated=0.0, step=float(self.step), seconds=time.perf_counter() - started)
            return metrics

        correcting = self.config.behaviour_correction == "tis"
        prompts, completions, advantages = [], [], []
        behaviours: list[list[float] | None] = []
        groups_corrected = 0
        for group in used:
            prompt = self.prompt_ids(group.question)
            corrected = False
            for completion, advantage in zip(
                group.completions, group_advantages([c.reward for c in group.completions]), strict=True
            ):
                ids = self.completion_ids(group.question, completion.text)
                prompts.append(prompt)
                completions.append(ids)
                advantages.append(advantage)
                behaviour = self.behaviour_logps(group.question, completion, ids) if correcting else None
                behaviours.append(behaviour)
                corrected = corrected or behaviour is not None
            groups_corrected += corrected
        batch = pack(prompts, completions, self.tokenizer.pad_token_id)
        advantage_tensor = torch.tensor(advantages, dtype=torch.float32)
        total_tokens = float(batch.completion_mask.sum())
        rows = len(prompts)
        chunk = self.config.micro_batch_size or rows
        # (B, C) behaviour log-probs and where they are known; None when no row has any, so an
        # uncorrected batch takes exactly the loss it always took.
        behaviour_table = None
        if groups_corrected:
            behaviour_table = _behaviour_table(behaviours, batch.completion_ids.shape)
        weight_stats = _WeightStats()

        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum, kl_sum, clip_sum = 0.0, 0.0, 0.0
        for start in range(0, rows, chunk):
            self._check_cancel()
            end = min(rows, start + chunk)
            loss, kl, clip = self._chunk_loss(
                batch, advantage_tensor, start, end, total_tokens, behaviour_table, weight_stats
            )
            loss.backward()
            share = (end - start) / rows
            loss_sum += float(loss.detach())
            kl_sum += kl * share
            clip_sum += clip * share
        self._check_cancel()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)
        rate = learning_rate(self.config, self.step)
        for group in self.optimizer.param_groups:
            group["lr"] = rate
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        metrics.update(
            loss=loss_sum,
            kl=kl_sum,
            clip_fraction=clip_sum,
            grad_norm=float(grad_norm),
            lr=rate,
            completion_tokens=total_tokens,
            behaviour_groups=float(groups_corrected),
            behaviour_missing=float(sum(b is None for b in behaviours)) if correcting else 0.0,
            behaviour_weight_mean=weight_stats.mean(),
            behaviour_weight_max=weight_stats.largest_weight(),
            behaviour_truncated=weight_stats.truncated_fraction(),
            updated=1.0,
            step=float(self.step),
            seconds=time.perf_counter() - started,
        )
        return metrics

    def _chunk_loss(
        self,
        batch: Any,
        advantages: Any,
        start: int,
        end: int,
        total_tokens: float,
        behaviour_table: tuple[Any, Any] | None = None,
        weight_stats: _WeightStats | None = None,
    ) -> tuple:
        import torch

        device = self.device
        prompt_ids = batch.prompt_ids[start:end]
        prompt_mask = batch.prompt_mask[start:end]
        # trim the chunk's own padding so short chunks do not pay for the longest row of the batch
        keep_p = int(prompt_mask.sum(1).max())
        comp_mask = batch.completion_mask[start:end]
        keep_c = max(1, int(comp_mask.sum(1).max()))
        prompt_ids, prompt_mask = prompt_ids[:, -keep_p:], prompt_mask[:, -keep_p:]
        comp_ids, comp_mask = batch.completion_ids[start:end, :keep_c], comp_mask[:, :keep_c]
        input_ids = torch.cat([prompt_ids, comp_ids], 1).to(device)
        attention = torch.cat([prompt_mask, comp_mask], 1).to(device)
        comp_mask = comp_mask.to(device)
        # Forward passes under the precision's autocast (bf16 on a capable GPU); the backward runs
        # outside it, in train(), and AdamW steps the fp32 weights (trainer/precision.py).
        with self.precision.autocast():
            logps = completion_logps(self.model, input_ids, attention, keep_c, self.config.temperature)
        ref_logps = None
        if self.ref_model is not None:
            with torch.no_grad(), self.precision.autocast():
                ref_logps = completion_logps(
                    self.ref_model, input_ids, attention, keep_c, self.config.temperature
                )
        old_logps = logps.detach()
        behaviour_logps, known = None, None
        if behaviour_table is not None:
            known = behaviour_table[1][start:end, :keep_c].to(device)
            if bool(known.any()):
                # A token without a behaviour log-prob gets the current one: weight exactly 1.
                values = behaviour_table[0][start:end, :keep_c].to(device)
                behaviour_logps = torch.where(known, values, old_logps)
        parts = grpo_loss(
            logps,
            old_logps,
            advantages[start:end].to(device),
            comp_mask,
            self.config.clip_eps_low,
            self.config.clip_eps_high,
            self.config.beta,
            ref_logps,
            self.config.loss_aggregation,
            normalizer=total_tokens,
            kl_ratio_correction=self.config.kl_ratio_correction,
            behaviour_logps=behaviour_logps,
            behaviour_cap=self.config.behaviour_cap,
        )
        if weight_stats is not None and parts.behaviour_weight is not None and known is not None:
            weight_stats.add(parts.behaviour_weight, parts.behaviour_truncated, known & (comp_mask > 0))
        loss = parts.loss
        if self.config.loss_aggregation == "sequence":
            loss = loss * (end - start) / advantages.numel()
        return loss, parts.mean_kl, parts.clip_fraction

    # --- checkpoints ---
    def save(self) -> None:
        import torch

        state = {
            "model": {k: v.detach().cpu() for k, v in self.model.state_dict().items()},
            "optimizer": self.optimizer.state_dict(),
            "step": self.step,
            "rng": {
                "python": random.getstate(),
                "torch": torch.get_rng_state(),
                "sampler": self.sampler.get_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            },
            "model_name": self.config.model,
        }
        path = checkpoint.write_checkpoint(
            self.config.checkpoint_dir, self.step, state, self.config.checkpoint_keep
        )
        self.log(f"checkpoint saved: {path.name}")

    def load(self) -> bool:
        """Restore model, optimizer, step and RNG from the newest valid checkpoint."""
        import torch

        found = checkpoint.read_newest_valid(self.config.checkpoint_dir, self.log)
        if found is None:
            return False
        step, state = found
        if state.get("model_name") != self.config.model:
            self.log(f"checkpoint step {step} is for model {state.get('model_name')!r}; not loading it")
            return False
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = int(state["step"])
        rng = state["rng"]
        random.setstate(_as_random_state(rng["python"]))
        torch.set_rng_state(rng["torch"])
        self.sampler.set_state(rng["sampler"])
        if rng.get("cuda") and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
        self.log(f"resumed from checkpoint step {self.step}")
        return True

    # --- evaluation ---
    def evaluate(self, split: str | None = None, step: int | None = None) -> dict[str, Any]:
        """Answer the held-out set of `split` (default: `eval_split`; trainer/evaluation.py) at
        the evaluation temperature and top-p, with a sampler seeded afresh from `eval_seed`: the
        same model always gets the same result. Appends the result to `<data_dir>/eval.jsonl`.
        `step` labels weights restored from an earlier step (default: the current step)."""
        evaluation = self.sliced_evaluation(split)
        while not evaluation.complete:
            evaluation.answer_next()
        result = evaluation.result()
        del result["slices"]  # one set of weights answered it all
        result["step"] = self.step if step is None else step
        self._keep_eval(result)
        return result

    def sliced_evaluation(self, split: str | None = None, chunk: int = _EVAL_CHUNK) -> Any:
        """The held-out evaluation as units of `chunk` completions to answer one at a time
        (trainer.evaluation.SlicedEvaluation): the node spreads it over the worker's spare time
        in several rounds. `evaluate()` is the same units answered back to back."""
        import torch

        from trainer.evaluation import SlicedEvaluation

        def answer_unit(refs: Sequence[QuestionRef], samples: int, state: Any) -> tuple[list[str], Any]:
            generator = torch.Generator(device="cpu")
            if state is None:
                generator.manual_seed(self.config.eval_seed)
            else:
                generator.set_state(state)
            rows = self._sample_ids(
                refs, samples, self.config.eval_temperature, generator, top_p=self.config.eval_top_p
            )
            texts = [self.tokenizer.decode(ids, skip_special_tokens=True) for ids in rows]
            return texts, generator.get_state()

        return SlicedEvaluation(
            self.registry, self.config, answer_unit, lambda: self.step, chunk=chunk, split=split
        )

    def keep_sliced_result(self, result: dict[str, Any], cache_dir: Path | None = None) -> None:
        """A sliced evaluation's result, kept as `evaluate()` keeps its own (eval.jsonl, log).
        When no train step ran between its units (every slice at the current step: these
        weights answered it all) it is also remembered for these weights, as `evaluate_remembered`
        would have stored it: the next node starting on them takes it at once."""
        self._keep_eval(result)
        slices = result.get("slices") or []
        if not slices or any(piece.get("step") != self.step for piece in slices):
            return
        from trainer import eval_results

        try:
            key = eval_results.result_key(self.model, self.config, result["split"], self.device)
        except Exception as error:  # the cache is an optimisation: never a reason to fail
            self.log(f"evaluation not remembered ({error})")
            return
        eval_results.store(key, {k: v for k, v in result.items() if k != "slices"}, cache_dir)

    def evaluate_remembered(self, cache_dir: Path | None = None) -> dict[str, Any]:
        """`evaluate()`, or the stored result of the same evaluation (trainer/eval_results.py: the
        same weights, questions and settings): a node's evaluation before joining, which every new
        data dir would otherwise run again on the same base. A stored result comes back with
        `remembered: True`, this policy's step, and the `seconds` of the run that made it."""
        from trainer import eval_results

        try:
            key = eval_results.result_key(self.model, self.config, self.config.eval_split, self.device)
        except Exception as error:  # the cache is an optimisation: never the reason an evaluation fails
            self.log(f"evaluation not looked up ({error}): evaluating")
            return self.evaluate()
        found = eval_results.load(key, cache_dir)
        if found is None:
            result = self.evaluate()
            eval_results.store(key, result, cache_dir)
            return result
        result = {**found, "step": self.step, "remembered": True}
        self._keep_eval(result)
        return result

    def remembered_evaluation(self, cache_dir: Path | None = None) -> dict[str, Any] | None:
        """The stored result of `evaluate()` on these weights (trainer/eval_results.py), as
        `evaluate_remembered` gives it, or None without evaluating: a node looks it up before
        joining and otherwise evaluates in slices while it plays."""
        from trainer import eval_results

        try:
            key = eval_results.result_key(self.model, self.config, self.config.eval_split, self.device)
        except Exception as error:  # the cache is an optimisation: never a reason to fail
            self.log(f"evaluation not looked up ({error})")
            return None
        found = eval_results.load(key, cache_dir)
        if found is None:
            return None
        result = {**found, "step": self.step, "remembered": True}
        self._keep_eval(result)
        return result

    def _keep_eval(self, result: dict[str, Any]) -> None:
        """An evaluation's result: the last one, a line in `<data_dir>/eval.jsonl`, a log line."""
        self.last_eval = result
        self.config.data_path.mkdir(parents=True, exist_ok=True)
        with open(self.config.data_path / "eval.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps(result) + "\n")
        self.log(
            f"eval step {result['step']}: accuracy {result['accuracy']:.3f} reward {result['reward']:.3f} "
            f"on {result['questions']} held-out questions, {result['split']} split "
            f"({result['seconds']:.1f} s{', remembered' if result.get('remembered') else ''})"
        )

    # --- supervised warm-up (teaches a fresh tiny model the answer format) ---
    def warmup(self, steps: int, questions_per_step: int = 8, lr: float = 1e-3) -> list[float]:
        return supervised_warmup(
            model=self.model,
            tokenizer=self.tokenizer,
            registry=self.registry,
            prompt_ids=self.prompt_ids,
            device=self.device,
            seed=self.config.seed,
            max_new_tokens=self.config.max_new_tokens,
            check_cancel=self._check_cancel,
            steps=steps,
            questions_per_step=questions_per_step,
            lr=lr,
        )


def learning_rate(config: TrainerConfig, step: int) -> float:
    """The learning rate of update number `step` (0-based): constant, or a cosine from `lr` to 10% of
    it over `lr_decay_steps`. A function of the saved step, so a resumed run continues the schedule."""
    if config.lr_decay_steps <= 0:
        return config.lr
    progress = min(1.0, step / config.lr_decay_steps)
    return config.lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def _behaviour_table(behaviours: Sequence[Sequence[float] | None], shape: Any) -> tuple[Any, Any]:
    """(B, C) float32 behaviour log-probs and the (B, C) bool mask of where they are known."""
    import torch

    values = torch.zeros(tuple(shape), dtype=torch.float32)
    known = torch.zeros(tuple(shape), dtype=torch.bool)
    for row, behaviour in enumerate(behaviours):
        if behaviour:
            values[row, : len(behaviour)] = torch.tensor(behaviour, dtype=torch.float32)
            known[row, : len(behaviour)] = True
    return values, known


class _WeightStats:
    """Importance weights of the tokens that had behaviour log-probs, over a step's micro-batches."""

    def __init__(self) -> None:
        self.total = 0.0
        self.tokens = 0
        self.truncated = 0
        self.largest: float | None = None

    def add(self, weight: Any, truncated: Any, counted: Any) -> None:
        tokens = int(counted.sum())
        if tokens == 0:
            return
        picked = weight[counted]
        self.total += float(picked.sum())
        self.tokens += tokens
        self.truncated += int((truncated & counted).sum())
        largest = float(picked.max())
        self.largest = largest if self.largest is None else max(self.largest, largest)

    def mean(self) -> float:
        return self.total / self.tokens if self.tokens else 1.0  # no corrected token: all weights 1

    def largest_weight(self) -> float:
        return 1.0 if self.largest is None else self.largest

    def truncated_fraction(self) -> float:
        return self.truncated / self.tokens if self.tokens else 0.0


def _remember(cache: OrderedDict, key: Any, value: list[Any]) -> None:
    cache[key] = value
    cache.move_to_end(key)
    if len(cache) > _TOKEN_CACHE_SIZE:
        cache.popitem(last=False)


def _as_random_state(state: Any) -> tuple:
    """random.setstate wants tuples; a weights_only round trip may hand back lists."""
    version, internal, gauss = state
    return (version, tuple(internal), gauss)
