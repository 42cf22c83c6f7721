"""One builder of the held-out evaluation set: protocol.questions.evaluation_questions.

protocol/questions.py drew evaluation questions by hash while trainer/tasks.py scanned for
held-out texts: two sets under one name, and only the trainer's was used. The protocol now holds
the trainer's rule (the content split and the scan) and the trainer hands it its texts; this
fails if the trainer builds its set any other way again. Likewise one rule says when an
evaluation is due, for `swarmp2p train` and the node's round loop (swarmp2p/heldout.py).
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from protocol.questions import EVAL_INDEX_BASE, evaluation_questions
from swarmp2p.heldout import EvalSettings, HeldOutEvaluation
from trainer.config import TrainerConfig
from trainer.evaluation import eval_due
from trainer.tasks import ReasoningGymRegistry

TASKS = ("number_sequence", "count_bits")  # hundreds of content keys each at difficulty 0


def test_the_trainers_set_is_the_protocols() -> None:
    registry = ReasoningGymRegistry(TASKS, difficulty=0)

    for per_task, seed in ((8, 99), (3, 20261123)):
        expected = list(evaluation_questions(registry.task_names(), seed, per_task, registry.content_key))
        assert registry.eval_questions(per_task, seed) == expected
        assert len(expected) == per_task * len(TASKS)
        # Held out by the registry's own test too: never trained on.
        assert all(registry.is_heldout(ref) and ref.index >= EVAL_INDEX_BASE for ref in expected)


@given(
    every=st.integers(0, 6),
    before_train=st.booleans(),
    rounds_done=st.integers(0, 30),
    last_at=st.none() | st.integers(0, 30),
)
def test_the_round_loop_and_swarmp2p_train_share_one_schedule(
    every: int, before_train: bool, rounds_done: int, last_at: int | None
) -> None:
    # swarmp2p/heldout.py had its own copy of trainer.evaluation.eval_due.
    evaluation = HeldOutEvaluation(EvalSettings(every=every, before_train=before_train), Counter())
    evaluation.rounds_done = rounds_done
    evaluation.last_at = last_at
    config = TrainerConfig(eval_every=every, eval_before_train=before_train)
    assert evaluation.due() == eval_due(config, rounds_done, last_at)
