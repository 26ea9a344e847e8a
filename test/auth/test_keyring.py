"""Keyrings: derivation per robot, rotation, files that only their owner can read."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from fleet_idempotency.auth import FleetKeyring, KeyringError, RobotKeyring, WatchedKeyring
from fleet_idempotency.auth.keyring import derive_robot_key


def test_each_robot_gets_its_own_keys_and_never_the_masters(tmp_path: Path) -> None:
    fleet = FleetKeyring.generate("k1")
    amr, forklift = fleet.for_robot("amr_1"), fleet.for_robot("forklift_1")
    assert amr.keys["k1"] != forklift.keys["k1"]
    assert fleet.keys["k1"] not in (amr.keys["k1"], forklift.keys["k1"])
    assert amr.keys["k1"] == derive_robot_key(fleet.keys["k1"], "amr_1")


def test_rotation_adds_activates_and_retires_keeping_an_active_key() -> None:
    fleet = FleetKeyring.generate("k1")
    fleet = fleet.add("k2")
    assert fleet.active == "k1" and set(fleet.keys) == {"k1", "k2"}
    with pytest.raises(KeyringError, match="already exists"):
        fleet.add("k2")
    with pytest.raises(KeyringError, match="is active"):
        fleet.retire("k1")
    fleet = fleet.activate("k2").retire("k1")
    assert (fleet.active, set(fleet.keys)) == ("k2", {"k2"})
    with pytest.raises(KeyringError, match="no key 'k9'"):
        fleet.activate("k9")


def test_saved_keyrings_are_private_and_load_back(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "fleet.json"
    fleet = FleetKeyring.generate()
    fleet.save(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert FleetKeyring.load(path) == fleet


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("not json", "invalid"),
        (json.dumps({"keys": {"k1": "zz"}, "active": "k1"}), "64 lower-case hex"),
        (json.dumps({"keys": {"k 1": "a" * 64}}), "key id"),
        (json.dumps({"keys": {"k1": "a" * 64}, "active": "k2"}), "not among the keys"),
        (json.dumps({"keys": {}, "extra": 1}), "extra"),
    ],
)
def test_a_bad_keyring_file_is_a_clear_error(tmp_path: Path, content: str, fragment: str) -> None:
    path = tmp_path / "fleet.json"
    path.write_text(content)
    with pytest.raises(KeyringError) as error:
        FleetKeyring.load(path)
    assert str(path) in str(error.value)
    assert fragment.lower() in str(error.value).lower()


def test_a_missing_keyring_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KeyringError, match="cannot read the keyring"):
        RobotKeyring.load(tmp_path / "nope.json")


def test_a_watched_keyring_reloads_on_change_and_keeps_its_keys_on_a_broken_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "amr_1.json"
    fleet = FleetKeyring.generate("k1")
    fleet.for_robot("amr_1").save(path)
    watched = WatchedKeyring(path, RobotKeyring)
    assert watched.refresh() is None  # unchanged
    fleet = fleet.add("k2")
    fleet.for_robot("amr_1").save(path)
    reloaded = watched.refresh()
    assert reloaded is not None and set(reloaded.keys) == {"k1", "k2"}
    path.write_text("{ half written")
    with pytest.raises(KeyringError):
        watched.refresh()
    assert set(watched.keyring.keys) == {"k1", "k2"}, "the keys in force stay in force"
