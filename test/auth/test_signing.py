"""Signed commands: the robot executes only what the fleet keyring's holder signed."""

from __future__ import annotations

import dataclasses

import pytest

from fleet_idempotency.auth import CommandSigner, CommandVerifier, FleetKeyring, Verdict
from fleet_idempotency.protocol import Delivery

COMMAND = Delivery(
    key="wms:order-1",
    client_id="wms",
    robot_id="forklift_1",
    command_type="pick",
    payload_json='{"slot": "A1"}',
    attempt=1,
)


def signed(signer: CommandSigner, delivery: Delivery) -> Delivery:
    key_id, tag = signer.sign(delivery)
    return dataclasses.replace(delivery, auth_key_id=key_id, auth_tag=tag)


def verify(verifier: CommandVerifier, delivery: Delivery) -> Verdict:
    return verifier.verify(delivery, delivery.auth_key_id, delivery.auth_tag)


def test_a_signed_command_is_authentic_for_its_robot_only() -> None:
    fleet = FleetKeyring.generate()
    command = signed(CommandSigner(fleet), COMMAND)
    assert verify(CommandVerifier(fleet.for_robot("forklift_1")), command) is Verdict.AUTHENTIC
    # Another robot holds other keys: a command captured for one cannot drive another.
    retargeted = dataclasses.replace(command, robot_id="forklift_2")
    assert verify(CommandVerifier(fleet.for_robot("forklift_2")), retargeted) is Verdict.BAD_TAG


@pytest.mark.parametrize(
    "change",
    [
        {"key": "wms:order-2"},
        {"client_id": "other"},
        {"command_type": "place"},
        {"payload_json": '{"slot": "A2"}'},
        {"attempt": 2},
        {"fencing_token": 7},
        {"auth_tag": "0" * 64},
        # hmac.compare_digest raises TypeError on str with non-ASCII characters: found by
        # the node fuzz test as an exception in the agent's command callback.
        {"auth_tag": "ключ-🙂"},
        {"auth_tag": "\x00" * 64},
        {"auth_tag": ""},
    ],
    ids=lambda change: f"{next(iter(change))}={str(next(iter(change.values())))[:8]!r}",
)
def test_any_altered_field_breaks_the_tag(change: dict[str, object]) -> None:
    fleet = FleetKeyring.generate()
    command = dataclasses.replace(signed(CommandSigner(fleet), COMMAND), **change)
    assert verify(CommandVerifier(fleet.for_robot("forklift_1")), command) is Verdict.BAD_TAG


def test_unsigned_and_unknown_key_commands_are_told_apart() -> None:
    fleet = FleetKeyring.generate("k1")
    verifier = CommandVerifier(fleet.for_robot("forklift_1"))
    assert verify(verifier, COMMAND) is Verdict.UNSIGNED
    stranger = FleetKeyring.generate("k9")
    assert verify(verifier, signed(CommandSigner(stranger), COMMAND)) is Verdict.UNKNOWN_KEY
    same_id_other_secret = FleetKeyring.generate("k1")
    forged = signed(CommandSigner(same_id_other_secret), COMMAND)
    assert verify(verifier, forged) is Verdict.BAD_TAG


def test_during_rotation_a_robot_accepts_the_old_and_the_new_key() -> None:
    old = FleetKeyring.generate("k1")
    both = old.add("k2")
    robot = CommandVerifier(both.for_robot("forklift_1"))
    assert verify(robot, signed(CommandSigner(old), COMMAND)) is Verdict.AUTHENTIC
    assert verify(robot, signed(CommandSigner(both.activate("k2")), COMMAND)) is Verdict.AUTHENTIC
    retired = CommandVerifier(both.activate("k2").retire("k1").for_robot("forklift_1"))
    assert verify(retired, signed(CommandSigner(old), COMMAND)) is Verdict.UNKNOWN_KEY


def test_a_keyring_without_an_active_key_cannot_sign() -> None:
    with pytest.raises(ValueError, match="no active key"):
        CommandSigner(FleetKeyring(keys={"k1": "a" * 64}))
