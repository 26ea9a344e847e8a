"""DelayedAcks: a held answer goes out after its delay unless settled first."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from fleet_idempotency.agent.delayed_acks import DelayedAcks

TIMEOUT_S = 10.0


class Sent:
    def __init__(self) -> None:
        self.items: list[tuple[str, float]] = []
        self._changed = threading.Condition()

    def publisher(self, name: str) -> Callable[[], None]:
        def publish() -> None:
            with self._changed:
                self.items.append((name, time.monotonic()))
                self._changed.notify_all()

        return publish

    def wait_for(self, count: int) -> list[str]:
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.items) >= count, TIMEOUT_S)
            return [name for name, _ in self.items]


def test_a_held_answer_goes_out_after_the_delay_and_in_the_order_held() -> None:
    sent, acks = Sent(), DelayedAcks(0.05)
    held_at = time.monotonic()
    acks.hold("a", sent.publisher("a"))
    acks.hold("b", sent.publisher("b"))
    assert sent.wait_for(2) == ["a", "b"]
    assert sent.items[0][1] - held_at >= 0.05
    assert acks.held() == 0


def test_a_settled_answer_is_never_sent_and_settle_says_whether_it_was_held() -> None:
    sent, acks = Sent(), DelayedAcks(0.05)
    acks.hold("dropped", sent.publisher("dropped"))
    assert acks.settle("dropped") is True
    assert acks.settle("dropped") is False  # nothing held any more
    assert acks.settle("never-held") is False
    acks.hold("later", sent.publisher("later"))
    assert sent.wait_for(1) == ["later"]  # its deadline passed after the dropped one's


def test_a_key_held_again_keeps_its_own_deadline() -> None:
    """Settled and held again (a refused command re-claimed), the key's first deadline
    does not release the second answer early."""
    now = [100.0]
    sent, acks = Sent(), DelayedAcks(10.0, clock=lambda: now[0])
    acks.hold("k", sent.publisher("first"))
    acks.settle("k")
    now[0] = 105.0
    acks.hold("k", sent.publisher("second"))  # due at 115
    now[0] = 111.0  # past the first deadline only
    acks.hold("wake", sent.publisher("wake"))  # due at 121
    assert acks.held() == 2
    now[0] = 116.0
    acks.hold("nudge", sent.publisher("nudge"))
    assert sent.wait_for(1) == ["second"]
    acks.close()


def test_close_sends_what_is_held_and_later_holds_go_out_at_once() -> None:
    sent, acks = Sent(), DelayedAcks(60.0)
    acks.hold("held", sent.publisher("held"))
    acks.close()
    assert sent.wait_for(1) == ["held"]
    acks.hold("after", sent.publisher("after"))
    assert sent.wait_for(2) == ["held", "after"]


def test_a_failing_publish_is_reported_and_the_others_still_go_out() -> None:
    errors: list[Exception] = []
    sent, acks = Sent(), DelayedAcks(0.01, on_error=errors.append)

    def broken() -> None:
        raise RuntimeError("publisher destroyed")

    acks.hold("broken", broken)
    acks.hold("fine", sent.publisher("fine"))
    assert sent.wait_for(1) == ["fine"]
    assert [str(error) for error in errors] == ["publisher destroyed"]


def test_no_delay_is_not_a_delayed_acks() -> None:
    with pytest.raises(ValueError, match="positive"):
        DelayedAcks(0.0)
