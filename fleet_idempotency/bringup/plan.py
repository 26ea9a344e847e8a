"""One fleet description -> the list of nodes to start.

``fleet.launch.py`` (for ``ros2 launch``) and ``fleet-idem demo``/``up`` (plain processes,
where ``ros2 launch`` is not installed) both start exactly what ``launch_plan`` returns, so
the two ways of bringing up a fleet cannot drift apart. No ROS imports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fleet_idempotency.description.agent_parameters import (
    ParameterValue,
    agent_namespace,
    agent_parameters,
)
from fleet_idempotency.description.fleet import FleetConfig, RobotSpec

PACKAGE = "fleet_idempotency"


@dataclass(frozen=True)
class NodeSpec:
    """What ``launch_ros.actions.Node`` needs: executable, name, namespace, parameters."""

    executable: str
    name: str
    namespace: str
    parameters: dict[str, ParameterValue] = field(default_factory=dict)
    package: str = PACKAGE

    def ros_arguments(self) -> list[str]:
        """The same node as command-line ROS arguments (for a plain subprocess).

        No ``__node`` remap: it would rename every node of the process, including the
        helper nodes an agent or the orchestrator creates, to the same name. Each node
        class already carries its conventional name.
        """
        arguments = ["--ros-args"]
        if self.namespace:
            arguments += ["-r", f"__ns:={self.namespace}"]
        for name, value in self.parameters.items():
            arguments += ["-p", f"{name}:={render_parameter(value)}"]
        return arguments


def render_parameter(value: ParameterValue) -> str:
    """``value`` as a ``-p name:=value`` argument. ROS parses it as YAML: booleans must
    be lower-case, and a string YAML would read as anything but that string (a number,
    a boolean, JSON, nothing) is single-quoted so that it stays a string."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            parsed = None
        if parsed != value:
            return "'" + value.replace("'", "''") + "'"
    return str(value)


def agent_node(
    fleet: FleetConfig,
    robot: RobotSpec,
    *,
    store_dir: Path,
    time_scale: float | None = None,
    robot_index: int = 0,
    keyring_dir: Path | None = None,
) -> NodeSpec:
    parameters = agent_parameters(
        fleet,
        robot,
        store_dir=store_dir,
        time_scale=time_scale,
        robot_index=robot_index,
        keyring_dir=keyring_dir,
    )
    return NodeSpec("agent_driver", "agent_driver", agent_namespace(robot.id), parameters)


def launch_plan(
    fleet: FleetConfig,
    *,
    fleet_file: Path,
    store_dir: Path,
    time_scale: float | None = None,
    robots: list[str] | None = None,
    with_orchestrator: bool = True,
    with_world: bool = True,
    keyring_dir: Path | None = None,
    with_http: bool = True,
    http_port: int | None = None,
    replicas: int = 1,
    store_url: str | None = None,
) -> list[NodeSpec]:
    """Every node of the fleet: world simulator, orchestrator, one agent per robot, and
    the HTTP API beside the orchestrator (``http_port``: None, the fleet file's).

    With ``keyring_dir`` (see ``bringup/keys.py``), the orchestrator signs every command
    and each robot executes only signed ones. With ``store_url`` (postgresql://), the
    orchestrator is ``replicas`` replicas sharing that database: the first, named
    "orchestrator", serves the API under /fleet (the HTTP API talks to it); replica N is
    "orchestrator_N" under /fleet/orchestrator_N.
    """
    if replicas < 1 or (replicas > 1 and not store_url):
        raise ValueError("replicas must be 1, or more with a shared store_url (postgresql://)")
    chosen = [r for r in fleet.robots if robots is None or r.id in robots]
    unknown = sorted(set(robots or []) - {r.id for r in fleet.robots})
    if unknown:
        raise ValueError(f"robots not in the fleet file: {unknown}")
    plan: list[NodeSpec] = []
    if with_world:
        plan.append(
            NodeSpec("world_simulator", "world_simulator", "", {"fleet_file": str(fleet_file)})
        )
    for replica in range(1, replicas + 1 if with_orchestrator else 1):
        orchestrator = fleet.orchestrator
        name = "orchestrator" if replica == 1 else f"orchestrator_{replica}"
        shared: dict[str, ParameterValue] = {}
        if store_url:
            shared = {
                "store_url": store_url,
                "replica_name": name,
                "api_namespace": "/fleet" if replica == 1 else f"/fleet/{name}",
            }
        plan.append(
            NodeSpec(
                "orchestrator",
                name,
                # Its own namespace keeps replica node names unique in the graph.
                "" if replica == 1 else f"/fleet/{name}",
                {
                    **shared,
                    "fleet_file": str(fleet_file),
                    "store_dir": str(store_dir / "orchestrator"),
                    "queue_capacity_per_robot": orchestrator.queue_capacity_per_robot,
                    "retry_initial_s": orchestrator.retry_initial_s,
                    "retry_min_s": orchestrator.retry_min_s,
                    "retry_max_s": orchestrator.retry_max_s,
                    "acknowledged_resend_s": orchestrator.acknowledged_resend_s,
                    "unanswered_per_robot": orchestrator.unanswered_per_robot,
                    "offline_after_s": orchestrator.offline_after_s,
                    "retention_s": orchestrator.retention_s,
                    "duplicate_delivery_probability": fleet.faults.duplicate_delivery_probability,
                    "reorder_delivery_probability": fleet.faults.reorder_delivery_probability,
                    "seed": fleet.faults.seed,
                    **(
                        {"auth_keyring": str(keyring_dir / "fleet.json")}
                        if keyring_dir is not None
                        else {}
                    ),
                },
            )
        )
    for index, robot in enumerate(chosen):
        plan.append(
            agent_node(
                fleet,
                robot,
                store_dir=store_dir,
                time_scale=time_scale,
                robot_index=index,
                keyring_dir=keyring_dir,
            )
        )
    if with_orchestrator and with_http:
        port = fleet.http.port if http_port is None else http_port
        plan.append(
            NodeSpec("http_api", "http_api", "", {"fleet_file": str(fleet_file), "port": port})
        )
    return plan


def api_namespaces(plan: list[NodeSpec]) -> list[str]:
    """Where each orchestrator (replica) of the plan serves its API, first replica first."""
    return [
        str(spec.parameters.get("api_namespace", "/fleet"))
        for spec in plan
        if spec.executable == "orchestrator"
    ]


def http_url(plan: list[NodeSpec], fleet: FleetConfig) -> str | None:
    """Where the plan's HTTP API (and fleet page) listens; None without one."""
    for spec in plan:
        if spec.executable == "http_api":
            return f"http://{fleet.http.host}:{spec.parameters['port']}/"
    return None


def parameters_as_launch(spec: NodeSpec) -> list[dict[str, Any]]:
    """Parameters in the shape ``launch_ros.actions.Node(parameters=...)`` takes."""
    return [dict(spec.parameters)]


# As in ``fleet-idem``'s supervisor: a node that dies is started again. A moment's delay
# lets the dead participant leave the DDS graph and keeps a crash loop from spinning.
RESPAWN_DELAY_S = 2.0


def launch_node_arguments(spec: NodeSpec) -> dict[str, Any]:
    """The keyword arguments of ``launch_ros.actions.Node`` for one node of the plan.

    No ``name=``: launch_ros turns it into a process-wide ``__node`` remap that would give
    the helper nodes of an agent or the orchestrator the same name; each node class
    already carries its conventional name.
    """
    return {
        "package": spec.package,
        "executable": spec.executable,
        "namespace": spec.namespace,
        "parameters": parameters_as_launch(spec),
        "output": "screen",
        "respawn": True,
        "respawn_delay": RESPAWN_DELAY_S,
    }


def optional_path(text: str) -> Path | None:
    """A launch argument naming a directory; '' means "not given"."""
    return Path(text).expanduser() if text.strip() else None


def time_scale_for_speed(speed: str | float | None) -> float | None:
    """A launch argument ``speed`` (speed-up factor) as a time scale; '' or None: no override."""
    if speed is None or (isinstance(speed, str) and not speed.strip()):
        return None
    factor = float(speed)
    if factor <= 0:
        raise ValueError(f"speed must be > 0 (a speed-up factor), got {speed!r}")
    return 1.0 / factor
