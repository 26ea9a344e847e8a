"""The fleet description drives the node list both bring-up paths start."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from rclpy.context import Context
from rclpy.parameter import Parameter

from fleet_idempotency.bringup.plan import (
    PASSWORD_VARIABLE,
    NodeSpec,
    api_namespaces,
    http_url,
    launch_node_arguments,
    launch_plan,
    parse_broker,
    time_scale_for_speed,
    vda5050_robots,
    with_broker,
)
from fleet_idempotency.description.fleet import FleetConfigError, load_fleet, parse_fleet

from support.paths import REPO

FLEET_FILE = REPO / "config" / "fleet.yaml"


def test_default_fleet_plans_world_orchestrator_and_one_agent_per_robot(tmp_path: Path) -> None:
    fleet = load_fleet(FLEET_FILE)
    plan = launch_plan(fleet, fleet_file=FLEET_FILE, store_dir=tmp_path)
    executables = [spec.executable for spec in plan]
    assert executables[:2] == ["world_simulator", "orchestrator"]
    agents = [spec for spec in plan if spec.executable == "agent_driver"]
    assert [spec.namespace for spec in agents] == [f"/fleet/{r.id}" for r in fleet.robots]
    forklift = next(spec for spec in agents if spec.parameters["robot_id"] == "forklift_1")
    assert forklift.parameters["robot_type"] == "forklift"
    assert forklift.parameters["store_dir"] == str(tmp_path / "robots")
    assert forklift.parameters["backend"] == "simulated"
    # The fleet's simulated time is the simulated backend's parameter.
    assert forklift.parameters["backend_params.time_scale"] == fleet.simulation.time_scale
    assert forklift.parameters["recovery_policy_by_type.pick"] == "interrupt"
    assert forklift.parameters["recovery_policy_by_type.move_to_waypoint"] == "resume"
    orchestrator = plan[1]
    assert orchestrator.parameters["store_dir"] == str(tmp_path / "orchestrator")


def test_speed_overrides_the_time_scale_and_robot_subsets(tmp_path: Path) -> None:
    fleet = load_fleet(FLEET_FILE)
    plan = launch_plan(
        fleet,
        fleet_file=FLEET_FILE,
        store_dir=tmp_path,
        time_scale=time_scale_for_speed("20"),
        robots=["arm_1"],
        with_orchestrator=False,
        with_world=False,
    )
    assert len(plan) == 1 and plan[0].parameters["robot_type"] == "arm"
    assert plan[0].parameters["backend_params.time_scale"] == pytest.approx(0.05)
    assert time_scale_for_speed("") is None
    with pytest.raises(ValueError, match="speed must be > 0"):
        time_scale_for_speed("0")
    with pytest.raises(ValueError, match="not in the fleet file"):
        launch_plan(fleet, fleet_file=FLEET_FILE, store_dir=tmp_path, robots=["ghost"])


def test_backend_and_its_parameters_reach_the_agent(tmp_path: Path) -> None:
    fleet = parse_fleet(
        {
            "robots": [
                {
                    "id": "charger_1",
                    "type": "charger",
                    "commands": ["dock"],
                    "backend": "fleet_idem_charger.backend:ChargingStation",
                    "backend_params": {"bays": ["D1", "D2"], "charge_s": 3, "log": "/x"},
                },
                {"id": "amr_1", "type": "amr", "backend_params": {"time_scale": 0.5}},
            ]
        }
    )
    plan = launch_plan(fleet, fleet_file=FLEET_FILE, store_dir=tmp_path, time_scale=0.01)
    charger, amr = (spec for spec in plan if spec.executable == "agent_driver")
    assert charger.parameters["backend"] == "fleet_idem_charger.backend:ChargingStation"
    # Structured values travel as JSON (ROS parameters are scalars or flat lists).
    assert charger.parameters["backend_params.bays"] == '["D1", "D2"]'
    assert charger.parameters["backend_params.charge_s"] == 3
    # simulation.time_scale is for the simulated backends only, and a robot's own wins.
    assert "backend_params.time_scale" not in charger.parameters
    assert amr.parameters["backend_params.time_scale"] == 0.5


def test_ros_arguments_render_parameters_as_ros_parses_them() -> None:
    spec = NodeSpec(
        "agent_driver",
        "agent_driver",
        "/fleet/amr_1",
        {
            "robot_id": "amr_1",
            "durable": True,
            "capacity": 4,
            "policy": "no",
            "backend_params.serial": "123",
            "backend_params.bays": '[{"name": "D1"}]',
            "backend_params.label": "it's",
        },
    )
    assert spec.ros_arguments() == [
        "--ros-args",
        "-r",
        "__ns:=/fleet/amr_1",
        "-p",
        "robot_id:=amr_1",
        "-p",
        "durable:=true",
        "-p",
        "capacity:=4",
        "-p",
        "policy:='no'",
        # Strings that YAML would read as a number or as JSON stay strings.
        "-p",
        "backend_params.serial:='123'",
        "-p",
        """backend_params.bays:='[{"name": "D1"}]'""",
        "-p",
        "backend_params.label:=it's",
    ]


def test_fleet_sections_are_validated_naming_the_field() -> None:
    with pytest.raises(FleetConfigError, match=r"faults\.result_drop_probability"):
        parse_fleet({"faults": {"result_drop_probability": 2}})
    with pytest.raises(FleetConfigError, match=r"retention\.recovery_policy_by_type\.pick"):
        parse_fleet({"retention": {"recovery_policy_by_type": {"pick": "retry"}}})
    with pytest.raises(FleetConfigError, match=r"simulation\.speed"):
        parse_fleet({"simulation": {"speed": 3}})


@pytest.mark.parametrize("launch_file", ["fleet.launch.py", "robot.launch.py"])
def test_launch_files_take_their_nodes_from_the_shared_plan(launch_file: str) -> None:
    """Checked without the launch package: the file must call the shared function."""
    tree = ast.parse((REPO / "launch" / launch_file).read_text())
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "fleet_idempotency.bringup.plan"
        for alias in node.names
    }
    called = {
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    assert "launch_plan" in imported and "launch_plan" in called
    assert any(
        isinstance(node, ast.FunctionDef) and node.name == "generate_launch_description"
        for node in tree.body
    )


def test_launch_files_respawn_every_node_after_a_delay_and_never_rename_nodes(
    tmp_path: Path,
) -> None:
    fleet = load_fleet(FLEET_FILE)
    for spec in launch_plan(fleet, fleet_file=FLEET_FILE, store_dir=tmp_path):
        arguments = launch_node_arguments(spec)
        assert arguments["respawn"] is True and arguments["respawn_delay"] > 0
        assert "name" not in arguments
        assert arguments["parameters"] == [spec.parameters]


def test_the_http_api_starts_beside_the_orchestrator_unless_turned_off(tmp_path: Path) -> None:
    fleet = load_fleet(FLEET_FILE)
    plan = launch_plan(fleet, fleet_file=FLEET_FILE, store_dir=tmp_path, http_port=9123)
    (http,) = [spec for spec in plan if spec.executable == "http_api"]
    assert http.parameters == {"fleet_file": str(FLEET_FILE), "port": 9123}
    assert http_url(plan, fleet) == "http://127.0.0.1:9123/"
    assert (
        launch_plan(fleet, fleet_file=FLEET_FILE, store_dir=tmp_path)[-1].parameters["port"]
        == fleet.http.port
    )
    without = launch_plan(fleet, fleet_file=FLEET_FILE, store_dir=tmp_path, with_http=False)
    assert "http_api" not in {spec.executable for spec in without}
    assert http_url(without, fleet) is None


def test_replicas_share_the_store_url_each_with_its_own_api_namespace(tmp_path: Path) -> None:
    fleet = load_fleet(FLEET_FILE)
    url = "postgresql://fleet@db.example:5432/fleet"
    plan = launch_plan(fleet, fleet_file=FLEET_FILE, store_dir=tmp_path, replicas=3, store_url=url)
    replicas = [spec for spec in plan if spec.executable == "orchestrator"]
    assert [spec.name for spec in replicas] == ["orchestrator", "orchestrator_2", "orchestrator_3"]
    assert api_namespaces(plan) == ["/fleet", "/fleet/orchestrator_2", "/fleet/orchestrator_3"]
    assert {spec.parameters["store_url"] for spec in replicas} == {url}
    assert [spec.parameters["replica_name"] for spec in replicas] == [s.name for s in replicas]
    assert len({(spec.namespace, spec.executable) for spec in replicas}) == 3, "unique nodes"
    # The HTTP API talks to the first replica, whose API is at /fleet.
    assert http_url(plan, fleet) is not None
    with pytest.raises(ValueError, match="store_url"):
        launch_plan(fleet, fleet_file=FLEET_FILE, store_dir=tmp_path, replicas=2)
    lone = launch_plan(fleet, fleet_file=FLEET_FILE, store_dir=tmp_path)
    assert api_namespaces(lone) == ["/fleet"]
    assert "store_url" not in next(s for s in lone if s.executable == "orchestrator").parameters


def test_the_fleet_files_re_send_and_pacing_fields_reach_the_orchestrators_settings(
    tmp_path: Path, ros_context: Context
) -> None:

    from fleet_idempotency.orchestrator.node import Orchestrator

    tuned = {
        "retry_initial_s": 0.7,
        "retry_min_s": 0.15,
        "retry_max_s": 4.0,
        "acknowledged_resend_s": 12.0,
        "unanswered_per_robot": 3,
    }
    fleet = parse_fleet(
        {"robots": [{"id": "amr_1", "type": "amr"}], "orchestrator": tuned}, "tuned.yaml"
    )
    (orchestrator,) = (
        spec
        for spec in launch_plan(fleet, fleet_file=FLEET_FILE, store_dir=tmp_path)
        if spec.executable == "orchestrator"
    )
    assert {name: orchestrator.parameters[name] for name in tuned} == tuned
    # The real node declares each of them and builds its dispatch settings from them.
    node = Orchestrator(
        context=ros_context,
        parameter_overrides=[
            Parameter(name, value=orchestrator.parameters[name])
            for name in ("fleet_file", "store_dir", *tuned)
        ],
    )
    try:
        assert {name: getattr(node.core.settings, name) for name in tuned} == tuned
    finally:
        node.shutdown()
        node.destroy_node()


MIXED_FLEET_FILE = REPO / "config" / "fleet_mixed.yaml"


def test_the_mixed_fleet_is_the_default_fleet_with_two_vda5050_vehicles() -> None:
    plain, mixed = load_fleet(FLEET_FILE), load_fleet(MIXED_FLEET_FILE)
    assert mixed.world == plain.world
    assert [(r.id, r.type, r.start) for r in mixed.robots] == [
        (r.id, r.type, r.start) for r in plain.robots
    ]
    assert [r.id for r in vda5050_robots(mixed)] == ["forklift_2", "amr_3"]


def test_a_vda5050_robot_gets_a_simulated_vehicle_on_the_same_broker(tmp_path: Path) -> None:
    fleet = with_broker(
        load_fleet(MIXED_FLEET_FILE), "127.0.0.1", 18830, username="fleet", password_env="PW"
    )
    plan = launch_plan(fleet, fleet_file=MIXED_FLEET_FILE, store_dir=tmp_path, time_scale=0.02)
    vehicles = {spec.name: spec for spec in plan if spec.executable == "vda5050_vehicle"}
    assert sorted(vehicles) == ["vehicle_amr_3", "vehicle_forklift_2"]
    forklift = vehicles["vehicle_forklift_2"]
    options = dict(zip(forklift.arguments[::2], forklift.arguments[1::2], strict=True))
    assert options == {
        "--robot-id": "forklift_2",
        "--robot-type": "forklift",
        "--start-x": "2.0",
        "--start-y": "8.0",
        "--time-scale": "0.02",
        "--password-env": "PW",
        "--manufacturer": "fleet-idem",
        "--serial-number": "FL-2",
        "--broker-host": "127.0.0.1",
        "--broker-port": "18830",
        "--username": "fleet",
    }
    assert forklift.env == {}  # no password anywhere but the environment variable
    assert forklift.ros_arguments()[: len(forklift.arguments)] == list(forklift.arguments)
    assert launch_node_arguments(forklift)["arguments"] == list(forklift.arguments)
    (agent,) = [s for s in plan if s.parameters.get("robot_id") == "forklift_2"]
    assert agent.parameters["backend"] == "vda5050"
    assert agent.parameters["backend_params.serial_number"] == "FL-2"
    assert agent.parameters["backend_params.broker_port"] == 18830
    assert agent.parameters["backend_params.password_env"] == "PW"
    # Named targets are found on the fleet file's map; no simulated time for a real vehicle.
    assert agent.parameters["backend_params.fleet_file"] == str(MIXED_FLEET_FILE.resolve())
    assert "backend_params.time_scale" not in agent.parameters
    assert not [s for s in plan if s.parameters.get("robot_id") == "forklift_1" and s.arguments]


def test_the_launch_argument_names_the_broker_and_a_plain_password_stays_off_argv(
    tmp_path: Path,
) -> None:
    fleet = parse_fleet(
        {
            "robots": [
                {
                    "id": "agv_1",
                    "type": "amr",
                    "backend": "vda5050",
                    "backend_params": {
                        "manufacturer": "acme",
                        "serial_number": "S1",
                        "broker_host": "broker.example",
                        "password": "s3cret",
                    },
                }
            ]
        }
    )
    assert parse_broker("") is None
    plan = launch_plan(
        fleet, fleet_file=tmp_path / "f.yaml", store_dir=tmp_path, broker=parse_broker("mq:1884")
    )
    (vehicle,) = [spec for spec in plan if spec.executable == "vda5050_vehicle"]
    assert "s3cret" not in vehicle.ros_arguments() and vehicle.env == {PASSWORD_VARIABLE: "s3cret"}
    assert launch_node_arguments(vehicle)["additional_env"] == {PASSWORD_VARIABLE: "s3cret"}
    assert vehicle.arguments[vehicle.arguments.index("--broker-host") + 1] == "mq"
    assert vehicle.arguments[vehicle.arguments.index("--broker-port") + 1] == "1884"
    # A real vehicle, with no world simulator: no simulated vehicle process.
    alone = launch_plan(fleet, fleet_file=tmp_path / "f.yaml", store_dir=tmp_path, with_world=False)
    assert not [spec for spec in alone if spec.executable == "vda5050_vehicle"]
    with pytest.raises(ValueError, match="host:port"):
        parse_broker("no-port")
    arm = parse_fleet(
        {"robots": [{"id": "a", "type": "arm", "backend": "vda5050", "backend_params": {}}]}
    )
    with pytest.raises(ValueError, match="amr or a forklift"):
        launch_plan(arm, fleet_file=tmp_path / "f.yaml", store_dir=tmp_path)
