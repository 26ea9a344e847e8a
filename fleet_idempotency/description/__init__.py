"""The fleet as its file describes it: below every part that reads it.

- ``layout``: the warehouse's waypoints, docks and slots.
- ``fleet``: the fleet file (YAML, validated with pydantic): robots, their backends,
  retention, orchestrator, HTTP and fault settings.
- ``agent_parameters``: a robot's entry -> its agent driver's node parameters.
- ``resources``: where the installed config/ and launch/ files live.
"""

from .fleet import FleetConfig, FleetConfigError, RobotSpec, load_fleet, parse_fleet

__all__ = ["FleetConfig", "FleetConfigError", "RobotSpec", "load_fleet", "parse_fleet"]
