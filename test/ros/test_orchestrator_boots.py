"""OrchestratorBoots: what counts as a replaced orchestrator process, and who is woken."""

from __future__ import annotations

from fleet_idempotency.ros.orchestrator_boots import OrchestratorBoots


def test_only_a_new_boot_id_after_a_first_one_is_a_replacement_and_wakes_waiters() -> None:
    boots = OrchestratorBoots()
    woken: list[str] = []
    with boots.waking(lambda: woken.append("a")), boots.waking(lambda: woken.append("b")):
        # The first boot id may arrive after a first send to that very process.
        boots.heard("/fleet", "boot-1")
        boots.heard("/fleet", "boot-1")  # the same process, heard again
        assert boots.replacements("/fleet") == 0 and woken == []
        boots.heard("/fleet", "boot-2")
        assert boots.replacements("/fleet") == 1 and sorted(woken) == ["a", "b"]
        # Namespaces (replicas) are counted apart.
        boots.heard("/replica_b", "boot-3")
        assert boots.replacements("/replica_b") == 0
    # A waiter that left is not woken any more.
    boots.heard("/fleet", "boot-4")
    assert boots.replacements("/fleet") == 2 and len(woken) == 2
