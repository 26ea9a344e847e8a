"""How the simulated kinds of robot move and handle loads: speeds, reach, durations.

Read by the simulated robots (robots/simulated.py) to act, by the mission planner to
plan, and by the Gazebo world to size its models: one table, below all three.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MotionProfile:
    speed_m_s: float  # 0: fixed base (an arm)
    reach_m: float  # how far from its base a fixed robot can pick or place
    handling_s: float  # one pick or one place
    docking_s: float


PROFILES: dict[str, MotionProfile] = {
    "amr": MotionProfile(speed_m_s=1.5, reach_m=0.0, handling_s=0.0, docking_s=4.0),
    "forklift": MotionProfile(speed_m_s=1.0, reach_m=0.0, handling_s=3.0, docking_s=5.0),
    "arm": MotionProfile(speed_m_s=0.0, reach_m=1.5, handling_s=2.0, docking_s=0.0),
}
