"""How a simulated robot reaches the world: in-process, or over ROS services.

Simulated robots only talk to a ``WorldLink``; the agent node gives them one backed by
the world simulator's services, tests and single-process fleets give them the World
object itself. Either way the same World logic decides what physically happens.
"""

from __future__ import annotations

from typing import Protocol

from fleet_idempotency.description.layout import WorldConfig
from fleet_idempotency.geometry import Pose
from fleet_idempotency.sim.world import World, WorldActionName


class WorldLink(Protocol):
    def geometry(self) -> WorldConfig: ...

    def locate(self, robot_id: str) -> Pose | None: ...

    def set_pose(self, robot_id: str, pose: Pose) -> None: ...

    def act(self, robot_id: str, key: str, action: WorldActionName, target: str, pose: Pose) -> str:
        """Do a counted action; return the item moved; raise WorldActionFailed."""
        ...


class LocalWorldLink:
    """A WorldLink straight onto a World in the same process."""

    def __init__(self, world: World) -> None:
        self.world = world

    def geometry(self) -> WorldConfig:
        return self.world.config

    def locate(self, robot_id: str) -> Pose | None:
        return self.world.locate(robot_id)

    def set_pose(self, robot_id: str, pose: Pose) -> None:
        self.world.set_pose(robot_id, pose)

    def act(self, robot_id: str, key: str, action: WorldActionName, target: str, pose: Pose) -> str:
        return self.world.act(robot_id, key, action, target, pose)
