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

from fleet_idempotency.bringup.system_tools import (
    MOSQUITTO,
    MOSQUITTO_PASSWD,
    POSTGRES,
    SystemTool,
)
from fleet_idempotency.description.agent_parameters import (
    ParameterValue,
    agent_namespace,
    agent_parameters,
)
from fleet_idempotency.description.fleet import FleetConfig, RobotSpec

PACKAGE = "fleet_idempotency"
# Robots of this backend are VDA 5050 vehicles behind an MQTT broker; in a simulated fleet
# each gets a simulated vehicle process (sim/vda5050_vehicle.py) beside its agent.
VDA5050_BACKEND = "vda5050"
# Where the simulated vehicles (and agents told ``password_env``) find the broker password.
PASSWORD_VARIABLE = "FLEET_IDEM_MQTT_PASSWORD"


@dataclass(frozen=True)
class NodeSpec:
    """What ``launch_ros.actions.Node`` needs: executable, name, namespace, parameters;
    ``arguments`` before the ROS arguments (a process configured by its command line) and
    ``env`` added to its environment (secrets kept off the command line)."""

    executable: str
    name: str
    namespace: str
    parameters: dict[str, ParameterValue] = field(default_factory=dict)
    package: str = PACKAGE
    arguments: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)

    def ros_arguments(self) -> list[str]:
        """The same node as command-line ROS arguments (for a plain subprocess).

        No ``__node`` remap: it would rename every node of the process, including the
        helper nodes an agent or the orchestrator creates, to the same name. Each node
        class already carries its conventional name.
        """
        arguments = [*self.arguments, "--ros-args"]
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
    fleet_file: Path | None = None,
) -> NodeSpec:
    parameters = agent_parameters(
        fleet,
        robot,
        store_dir=store_dir,
        time_scale=time_scale,
        robot_index=robot_index,
        keyring_dir=keyring_dir,
        fleet_file=fleet_file,
    )
    return NodeSpec("agent_driver", "agent_driver", agent_namespace(robot.id), parameters)


def vda5050_robots(fleet: FleetConfig) -> list[RobotSpec]:
    return [robot for robot in fleet.robots if robot.backend == VDA5050_BACKEND]


def system_tools_needed(fleet: FleetConfig, *, local_database: bool) -> list[SystemTool]:
    """The programs from Debian packages that ``demo``/``up`` start beside the fleet's nodes:
    a throwaway broker for its VDA 5050 vehicles, a throwaway database for replicas."""
    tools = [MOSQUITTO, MOSQUITTO_PASSWD] if vda5050_robots(fleet) else []
    return [*tools, POSTGRES] if local_database else tools


def with_broker(
    fleet: FleetConfig,
    host: str,
    port: int,
    *,
    username: str | None = None,
    password_env: str | None = None,
) -> FleetConfig:
    """``fleet`` with every VDA 5050 robot's broker set to ``host:port`` (and, when given,
    its username and the variable holding its password, replacing any plain password)."""
    robots = []
    for robot in fleet.robots:
        if robot.backend == VDA5050_BACKEND:
            params = {**robot.backend_params, "broker_host": host, "broker_port": port}
            if username is not None:
                params["username"] = username
            if password_env is not None:
                params.pop("password", None)
                params["password_env"] = password_env
            robots.append(robot.model_copy(update={"backend_params": params}))
        else:
            robots.append(robot)
    return fleet.model_copy(update={"robots": robots})


def parse_broker(text: str) -> tuple[str, int] | None:
    """A launch argument ``mqtt_broker:=host:port``; '' means "the fleet file's"."""
    if not text.strip():
        return None
    host, _, port = text.strip().rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65_536:
        raise ValueError(f"mqtt_broker must be host:port, got {text!r}")
    return host, int(port)


def vehicle_node(fleet: FleetConfig, robot: RobotSpec, *, time_scale: float | None) -> NodeSpec:
    """The simulated VDA 5050 vehicle of a ``vda5050`` robot: its serial number,
    manufacturer, topics, broker and start pose are those of the robot's agent; a plain
    password travels in its environment, never on its command line."""
    params = robot.backend_params
    if robot.type not in ("amr", "forklift"):
        raise ValueError(
            f"{robot.id}: a simulated VDA 5050 vehicle is an amr or a forklift, not {robot.type}"
        )
    missing = [name for name in ("manufacturer", "serial_number") if not params.get(name)]
    if missing:
        raise ValueError(f"{robot.id}: backend_params lack {', '.join(missing)} (vda5050)")
    scale = fleet.simulation.time_scale if time_scale is None else time_scale
    arguments = [
        "--robot-id", robot.id,
        "--robot-type", robot.type,
        "--start-x", str(robot.start.x),
        "--start-y", str(robot.start.y),
        "--time-scale", str(scale),
        "--password-env", str(params.get("password_env") or PASSWORD_VARIABLE),
    ]  # fmt: skip
    for name in (
        "manufacturer",
        "serial_number",
        "broker_host",
        "broker_port",
        "username",
        "interface_name",
        "major_version",
        "protocol_version",
        "map_id",
    ):
        if params.get(name) not in (None, ""):
            arguments += ["--" + name.replace("_", "-"), str(params[name])]
    env = {}
    if params.get("password") and not params.get("password_env"):
        env[PASSWORD_VARIABLE] = str(params["password"])
    return NodeSpec(
        "vda5050_vehicle", f"vehicle_{robot.id}", "", arguments=tuple(arguments), env=env
    )


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
    broker: tuple[str, int] | None = None,
) -> list[NodeSpec]:
    """Every node of the fleet: world simulator, orchestrator, one agent per robot, and
    the HTTP API beside the orchestrator (``http_port``: None, the fleet file's).

    Robots of the ``vda5050`` backend talk to their vehicle through an MQTT broker: the
    fleet file's (``backend_params.broker_host``/``broker_port``), or ``broker`` (host,
    port) for all of them. With the world simulator, each also gets a simulated vehicle
    process (``vehicle_<robot>``) acting in it.

    With ``keyring_dir`` (see ``bringup/keys.py``), the orchestrator signs every command
    and each robot executes only signed ones. With ``store_url`` (postgresql://), the
    orchestrator is ``replicas`` replicas sharing that database: the first, named
    "orchestrator", serves the API under /fleet (the HTTP API talks to it); replica N is
    "orchestrator_N" under /fleet/orchestrator_N.
    """
    if replicas < 1 or (replicas > 1 and not store_url):
        raise ValueError("replicas must be 1, or more with a shared store_url (postgresql://)")
    if broker is not None:
        fleet = with_broker(fleet, *broker)
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
                fleet_file=fleet_file,
            )
        )
    if with_world:
        plan += [
            vehicle_node(fleet, robot, time_scale=time_scale)
            for robot in chosen
            if robot.backend == VDA5050_BACKEND
        ]
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
    arguments: dict[str, Any] = {
        "package": spec.package,
        "executable": spec.executable,
        "namespace": spec.namespace,
        "parameters": parameters_as_launch(spec),
        "output": "screen",
        "respawn": True,
        "respawn_delay": RESPAWN_DELAY_S,
    }
    if spec.arguments:
        arguments["arguments"] = list(spec.arguments)
    if spec.env:
        arguments["additional_env"] = dict(spec.env)
    return arguments


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
