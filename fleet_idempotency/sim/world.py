"""The simulated warehouse: waypoints, docks, pallet slots and arm stations.

The world owns physical state (what lies where, what each robot carries, where each
robot stands) and counts side effects per (robot, idempotency key). It keeps no
idempotency logic of its own on purpose: it is the oracle, so a duplicate execution
shows up here as a count of 2 and, physically, as a pick from an empty slot.
No ROS imports; the world simulator node is a thin shell around this class.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any, Literal

from fleet_idempotency.description.layout import WorldConfig
from fleet_idempotency.geometry import Pose

WorldActionName = Literal["arrive", "pick", "place", "dock"]
COUNTED_ACTIONS: tuple[WorldActionName, ...] = ("arrive", "pick", "place", "dock")


class WorldActionFailed(RuntimeError):
    """The physical action could not be done (empty slot, occupied slot, empty forks)."""


class World:
    """Thread-safe physical state plus the side-effect oracle."""

    def __init__(self, config: WorldConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._slot_items: dict[str, str | None] = {
            name: slot.item for name, slot in config.slots.items()
        }
        self._carried: dict[str, str] = {}
        self._poses: dict[str, Pose] = {}
        self._docked: dict[str, str] = {}
        # (robot, key) -> actions done under that key; len > 1 means a duplicate execution.
        self._effects: defaultdict[tuple[str, str], list[str]] = defaultdict(list)
        self._failed_actions = 0

    # --- robots ---------------------------------------------------------------------------
    def register_robot(self, robot_id: str, start: Pose) -> None:
        """Place a robot at its start pose unless the world already knows where it is."""
        with self._lock:
            self._poses.setdefault(robot_id, start)

    def locate(self, robot_id: str) -> Pose | None:
        with self._lock:
            return self._poses.get(robot_id)

    def set_pose(self, robot_id: str, pose: Pose) -> None:
        """Movement in progress: not a side effect of its own, so not counted."""
        with self._lock:
            self._poses[robot_id] = pose
            self._docked.pop(robot_id, None)

    # --- counted actions ------------------------------------------------------------------
    def act(self, robot_id: str, key: str, action: WorldActionName, target: str, pose: Pose) -> str:
        """Do one counted action; return the item moved ('' when none) or raise."""
        with self._lock:
            self._effects[(robot_id, key)].append(action)
            self._poses[robot_id] = pose
            try:
                return self._apply(robot_id, action, target)
            except WorldActionFailed:
                self._failed_actions += 1
                raise

    def _apply(self, robot_id: str, action: WorldActionName, target: str) -> str:
        if action == "arrive":
            self._docked.pop(robot_id, None)
            return ""
        if action == "dock":
            if target not in self.config.docks:
                raise WorldActionFailed(f"no dock named {target!r}")
            self._docked[robot_id] = target
            return ""
        if target not in self._slot_items:
            raise WorldActionFailed(f"no slot named {target!r}")
        if action == "pick":
            if robot_id in self._carried:
                raise WorldActionFailed(f"{robot_id} already carries {self._carried[robot_id]!r}")
            item = self._slot_items[target]
            if item is None:
                raise WorldActionFailed(f"slot {target!r} is empty: nothing to pick")
            self._slot_items[target] = None
            self._carried[robot_id] = item
            return item
        # place
        carried = self._carried.get(robot_id)
        if carried is None:
            raise WorldActionFailed(f"{robot_id} carries nothing to place")
        if self._slot_items[target] is not None:
            raise WorldActionFailed(f"slot {target!r} is occupied by {self._slot_items[target]!r}")
        self._slot_items[target] = carried
        del self._carried[robot_id]
        return carried

    # --- oracle ---------------------------------------------------------------------------
    def side_effect_count(self, robot_id: str, key: str) -> int:
        with self._lock:
            return len(self._effects.get((robot_id, key), ()))

    def snapshot(self) -> dict[str, Any]:
        """Everything a test or report needs, as plain JSON-able data."""
        with self._lock:
            effects: dict[str, dict[str, list[str]]] = defaultdict(dict)
            for (robot_id, key), actions in self._effects.items():
                effects[robot_id][key] = list(actions)
            counts = [len(actions) for actions in self._effects.values()]
            return {
                "slots": dict(self._slot_items),
                "carried": dict(self._carried),
                "docked": dict(self._docked),
                "poses": {robot: pose.model_dump() for robot, pose in self._poses.items()},
                "side_effects": dict(effects),
                "max_side_effects_per_key": max(counts, default=0),
                "keys_with_side_effects": len(counts),
                "failed_actions": self._failed_actions,
                "items_total": self._items_total(),
            }

    def _items_total(self) -> int:
        # Pallets are neither created nor destroyed: slots + forks must always hold them all.
        on_slots = sum(1 for item in self._slot_items.values() if item is not None)
        return on_slots + len(self._carried)
