"""The simulated world: physical consequences and the side-effect oracle."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from fleet_idempotency.description.fleet import FleetConfigError, load_fleet, parse_fleet
from fleet_idempotency.description.layout import Slot, WorldConfig
from fleet_idempotency.geometry import Pose
from fleet_idempotency.sim.world import World, WorldActionFailed

from support.paths import FLEET_FILE

HERE = Pose(x=0, y=0)


def small_world() -> World:
    return World(
        WorldConfig(
            slots={
                "A1": Slot(x=1, y=1, item="P-1"),
                "B1": Slot(x=2, y=1),
                "S1": Slot(x=5, y=5, kind="station", item="I-1"),
            },
            docks={"D1": {"x": 0, "y": 0}},  # type: ignore[dict-item]
        )
    )


def test_pick_then_place_moves_the_pallet() -> None:
    world = small_world()
    assert world.act("forklift_1", "k1", "pick", "A1", HERE) == "P-1"
    assert world.act("forklift_1", "k2", "place", "B1", HERE) == "P-1"
    snapshot = world.snapshot()
    assert snapshot["slots"] == {"A1": None, "B1": "P-1", "S1": "I-1"}
    assert snapshot["carried"] == {}
    assert snapshot["items_total"] == 2


def test_a_second_pick_from_the_same_slot_fails_and_is_counted() -> None:
    world = small_world()
    world.act("forklift_1", "k1", "pick", "A1", HERE)
    world.act("forklift_1", "k2", "place", "B1", HERE)
    with pytest.raises(WorldActionFailed, match="empty"):
        world.act("forklift_1", "k1", "pick", "A1", HERE)
    # The oracle sees the duplicate execution even though it failed physically.
    assert world.side_effect_count("forklift_1", "k1") == 2
    assert world.snapshot()["max_side_effects_per_key"] == 2
    assert world.snapshot()["failed_actions"] == 1


def test_place_needs_a_load_and_a_free_slot() -> None:
    world = small_world()
    with pytest.raises(WorldActionFailed, match="carries nothing"):
        world.act("forklift_1", "k1", "place", "B1", HERE)
    world.act("forklift_1", "k2", "pick", "A1", HERE)
    with pytest.raises(WorldActionFailed, match="already carries"):
        world.act("forklift_1", "k3", "pick", "S1", HERE)
    with pytest.raises(WorldActionFailed, match="occupied"):
        world.act("forklift_1", "k4", "place", "S1", HERE)


def test_same_key_on_two_robots_counts_separately() -> None:
    world = small_world()
    world.act("amr_1", "k-123", "arrive", "W1", HERE)
    world.act("amr_2", "k-123", "arrive", "W1", HERE)
    assert world.side_effect_count("amr_1", "k-123") == 1
    assert world.side_effect_count("amr_2", "k-123") == 1


def test_poses_are_tracked_but_not_counted() -> None:
    world = small_world()
    world.register_robot("amr_1", Pose(x=3, y=4))
    world.register_robot("amr_1", Pose(x=9, y=9))  # a restart must not teleport the robot
    assert world.locate("amr_1") == Pose(x=3, y=4)
    world.set_pose("amr_1", Pose(x=1, y=1))
    world.act("amr_1", "k", "dock", "D1", Pose(x=0, y=0))
    snapshot = world.snapshot()
    assert snapshot["poses"]["amr_1"] == {"x": 0.0, "y": 0.0, "theta": 0.0}
    assert snapshot["docked"] == {"amr_1": "D1"}
    assert snapshot["keys_with_side_effects"] == 1


def test_unknown_targets_fail() -> None:
    world = small_world()
    with pytest.raises(WorldActionFailed, match="no slot"):
        world.act("forklift_1", "k", "pick", "Z9", HERE)
    with pytest.raises(WorldActionFailed, match="no dock"):
        world.act("amr_1", "k2", "dock", "D9", HERE)


def test_an_item_in_two_slots_is_a_config_error() -> None:
    with pytest.raises(ValidationError, match="more than one slot"):
        WorldConfig(slots={"A1": Slot(x=0, y=0, item="P-1"), "A2": Slot(x=1, y=0, item="P-1")})


def test_default_fleet_file_is_valid_and_heterogeneous() -> None:

    fleet = load_fleet(FLEET_FILE)
    assert {robot.type for robot in fleet.robots} == {"amr", "forklift", "arm"}
    assert fleet.robot("arm_1").capacity >= 1


def test_fleet_errors_name_the_field() -> None:
    with pytest.raises(FleetConfigError, match=r"robots\.0\.type: String should match"):
        parse_fleet({"robots": [{"id": "r1", "type": "sub marine"}]})
    # Another kind of robot than the simulated ones says what it can do.
    with pytest.raises(FleetConfigError, match=r"robots\.0: .*'submarine'.*'commands'"):
        parse_fleet({"robots": [{"id": "r1", "type": "submarine"}]})
    charger = parse_fleet({"robots": [{"id": "c1", "type": "charger", "commands": ["dock"]}]})
    assert charger.robot("c1").capabilities() == {"dock"}
    with pytest.raises(FleetConfigError, match="unique"):
        parse_fleet({"robots": [{"id": "r1", "type": "amr"}, {"id": "r1", "type": "arm"}]})
    with pytest.raises(FleetConfigError, match=r"world\.slots\.A1\.colour"):
        parse_fleet({"world": {"slots": {"A1": {"x": 0, "y": 0, "colour": "red"}}}})


def test_unreadable_fleet_files_are_clear_errors(tmp_path: object) -> None:
    from pathlib import Path

    folder = Path(str(tmp_path))
    with pytest.raises(FleetConfigError, match="cannot read"):
        load_fleet(folder / "missing.yaml")
    broken = folder / "broken.yaml"
    broken.write_text("robots: [\n")
    with pytest.raises(FleetConfigError, match="not valid YAML"):
        load_fleet(broken)
