"""Silencing reasoning-gym's prints in a worker thread must not swallow other threads' output."""

from __future__ import annotations

import sys
import threading

from trainer.quiet_stdout import silenced_stdout
from trainer.tasks import ReasoningGymRegistry


def test_silenced_thread_is_quiet_while_other_threads_still_print(capsys) -> None:
    inside = threading.Event()
    release = threading.Event()

    def worker() -> None:
        with silenced_stdout():
            print("from the silenced worker")
            inside.set()
            release.wait(10)
            print("still silenced")

    thread = threading.Thread(target=worker)
    thread.start()
    assert inside.wait(10)
    print("main thread line")  # printed while the worker is silenced
    release.set()
    thread.join(10)
    out = capsys.readouterr().out
    assert "main thread line" in out
    assert "silenced" not in out


def test_stdout_is_restored_after_nested_use(capsys) -> None:
    before = sys.stdout
    with silenced_stdout():
        with silenced_stdout():
            print("hidden")
        print("hidden too")
    assert sys.stdout is before
    print("shown")
    assert capsys.readouterr().out == "shown\n"


def test_scoring_bf_in_a_thread_keeps_main_thread_output(capsys) -> None:
    # bf is the default task that prints while it generates and scores.
    registry = ReasoningGymRegistry(["bf"])
    from protocol.messages import QuestionRef

    refs = [QuestionRef(task="bf", dataset_seed=3, index=i) for i in range(3)]
    done = threading.Event()

    def worker() -> None:
        for ref in refs:
            _prompt, answer = registry.question(ref)
            registry.score(ref, f"<answer>{answer}</answer>")
        done.set()

    thread = threading.Thread(target=worker)
    thread.start()
    ticks = 0
    while not done.is_set():
        print(f"tick{ticks}")
        ticks += 1
        done.wait(0.001)
    thread.join(30)
    out = capsys.readouterr().out
    # Every line the main thread printed while bf ran is there, and nothing bf printed is.
    assert out.split() == [f"tick{i}" for i in range(ticks)]
