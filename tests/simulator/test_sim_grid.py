"""The network's virtual-time grid and the Peer's cheap wait paths (simulator performance work)."""

from __future__ import annotations

import math
from unittest import mock

import hypothesis.strategies as st
import pytest
import trio
import trio.testing
from hypothesis import given

from protocol import codec
from protocol.errors import ProtocolError
from protocol.messages import FetchRequest
from simulator import network
from simulator.network import LinkModel, SimWorld, _on_grid
from simulator.runner import run_simulation
from simulator.scenario import NetworkSpec, Scenario, ScenarioError, scenario_from_mapping


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False), st.sampled_from([1, 5, 10, 20]))
def test_on_grid_rounds_up_to_a_multiple_of_the_grid(seconds: float, grid_ms: int) -> None:
    at = _on_grid(seconds, grid_ms)
    assert at >= seconds - 1e-6
    assert at - seconds < grid_ms / 1000 + 1e-6
    steps = at * 1000 / grid_ms
    assert math.isclose(steps, round(steps), abs_tol=1e-6)


@pytest.mark.parametrize("grid_ms", [1, 10])
def test_gossip_lands_on_the_grid(grid_ms: int) -> None:
    arrivals: list[float] = []

    async def main() -> None:
        world = SimWorld(
            LinkModel(time_grid_ms=grid_ms),
            seed=7,
            now_ms=lambda: round(trio.current_time() * 1000),
            round_of=lambda _ms: 0,
            inline_gossip=True,
        )
        ports = [world.attach(f"peer{i}") for i in range(12)]
        for port in ports[1:]:
            assert port.subscribe_inline("t", lambda _m: arrivals.append(trio.current_time()))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(world.run_deliveries)
            await trio.sleep(0.0123)  # publish off the grid
            await ports[0].publish("t", b"x")
            await trio.sleep(1)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert len(arrivals) == 11
    for at in arrivals:
        steps = at * 1000 / grid_ms
        assert math.isclose(steps, round(steps), abs_tol=1e-6)
        assert at > 0.0123 + 0.010 - 1e-9  # never earlier than the minimum latency


def test_sleep_wakeable_ends_early_when_woken_and_on_time_otherwise() -> None:
    woke: dict[float, float] = {}

    async def main() -> None:
        world = SimWorld(LinkModel(), seed=1, now_ms=lambda: 0, round_of=lambda _ms: 0)
        port = world.attach("a")
        wakers: dict[float, object] = {}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(world.run_deliveries)

            async def sleeper(seconds: float) -> None:
                await port.sleep_wakeable(seconds, lambda wake: wakers.__setitem__(seconds, wake))
                woke[seconds] = trio.current_time()

            nursery.start_soon(sleeper, 5.0)
            nursery.start_soon(sleeper, 2.0)
            await trio.sleep(1.0)
            wakers[5.0]()  # type: ignore[operator]  # wakes the 5 s sleeper at t=1
            wakers[5.0]()  # type: ignore[operator]  # a second call is a no-op
            await trio.sleep(5.0)
            wakers[2.0]()  # type: ignore[operator]  # already woken at t=2: no-op, no crash
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert woke == {5.0: pytest.approx(1.0), 2.0: pytest.approx(2.0)}


def test_time_grid_is_a_strict_scenario_key() -> None:
    assert scenario_from_mapping({"network": {"time_grid_ms": 5}}).network.time_grid_ms == 5
    with pytest.raises(ScenarioError):
        scenario_from_mapping({"network": {"time_grid_ms": 0}})


def test_fine_and_coarse_grids_both_complete_every_round_reproducibly() -> None:
    for grid_ms in (1, 10):
        scenario = Scenario(peers=6, rounds=3, seed=5, network=NetworkSpec(time_grid_ms=grid_ms))
        first, second = run_simulation(scenario), run_simulation(scenario)
        for result in (first, second):
            for records in result.records.values():
                assert [r.completed for r in records] == [True] * 3
        assert {p: [r.to_json() for r in rs] for p, rs in first.records.items()} == {
            p: [r.to_json() for r in rs] for p, rs in second.records.items()
        }


_TEXT = st.text(max_size=70) | st.sampled_from(["", "\ud800", "s" * 200])
_INT = st.integers(min_value=-(2**64), max_value=2**64) | st.booleans()


@given(_TEXT, _INT, _INT, _TEXT)
def test_codec_fast_path_matches_the_interpreter(swarm_id, round_number, stage, peer_id) -> None:  # type: ignore[no-untyped-def]
    """encode/decode (compiled fast path) give the same bytes, values and errors as the schema
    interpreter they fall back to."""
    message = FetchRequest(swarm_id=swarm_id, round=round_number, stage=stage, peer_id=peer_id)
    schema = codec.SCHEMAS[FetchRequest]
    try:
        expected: object = codec._check_record(schema, message, "fetch_req", encoding=True)
    except ProtocolError as error:
        expected = (error.reason, error.message)
    try:
        data = codec.encode(message)
    except ProtocolError as error:
        assert (error.reason, error.message) == expected
        return
    assert not isinstance(expected, tuple)
    assert codec.decode(data) == message


def _publish_twice(
    peers: int, subscribed: list[bool], senders: tuple[int, int], seed: int, jitter_ms: float, grid_ms: int
) -> tuple[list[tuple[float, int, list[str]]], float]:
    """The heap entries two publishes leave (arrival slot, order, receivers) and the next draw."""

    async def main() -> tuple[list[tuple[float, int, list[str]]], float]:
        world = SimWorld(
            LinkModel(jitter_ms=jitter_ms, time_grid_ms=grid_ms),
            seed=seed,
            now_ms=lambda: 0,
            round_of=lambda _ms: 0,
            inline_gossip=True,
        )
        ports = [world.attach(f"peer{i}") for i in range(peers)]
        for port, on in zip(ports, subscribed, strict=True):
            if on:
                assert port.subscribe_inline("t", lambda _m: None)
        await trio.sleep(0.0123)
        for sender in senders:
            await ports[sender].publish("t", b"x")
        entries = sorted(world._heap, key=lambda entry: entry[:2])
        return [
            (at, seq, [node.peer_id for node in nodes]) for at, seq, nodes, _ in entries
        ], world.rng.random()

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


@given(
    data=st.data(),
    peers=st.integers(2, 90),
    seed=st.integers(0, 2**32),
    jitter_ms=st.sampled_from([0.0, 0.5, 5.0, 37.0]),
    grid_ms=st.sampled_from([1, 3, 10]),
)
def test_bulk_arrival_slots_are_the_loops(
    data: st.DataObject, peers: int, seed: int, jitter_ms: float, grid_ms: int
) -> None:
    """publish's numpy path (a clean network, BULK_MIN_RECEIVERS subscribers or more) makes the
    same slots, in the same order, from the same draws as the one-receiver-at-a-time loop."""
    subscribed = data.draw(st.lists(st.booleans(), min_size=peers, max_size=peers))
    senders = (data.draw(st.integers(0, peers - 1)), data.draw(st.integers(0, peers - 1)))
    args = (peers, subscribed, senders, seed, jitter_ms, grid_ms)
    with mock.patch.object(network, "BULK_MIN_RECEIVERS", 1):
        bulk = _publish_twice(*args)
    with mock.patch.object(network, "BULK_MIN_RECEIVERS", 10**9):
        loop = _publish_twice(*args)
    assert bulk == loop
