"""Points and poses on the warehouse floor (metres, radians), shared by every layer.

At the bottom of the package so that the fleet description, the robot backend
interface and the world simulator can all speak of a pose without importing each other.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Point(_Model):
    x: float
    y: float


class Pose(_Model):
    x: float = 0.0
    y: float = 0.0
    theta: float = 0.0

    def distance_to(self, x: float, y: float) -> float:
        return math.hypot(x - self.x, y - self.y)
