"""The bare rclpy ceiling for the orchestrator bench: the pipeline's messages, no logic.

Same message types, topics per robot, processes and hops as a command through the real
fleet, with every store, check and state machine removed, each process on rclpy's
cheapest executor (SingleThreadedExecutor):

    client --SubmitCommand--> orchestrator --FleetCommand--> agent host (one node per
    robot) --WorldAction--> world; agent --CommandResult--> orchestrator, twice (the
    202 of the claim, then the result); the orchestrator publishes the same three
    FleetEvents per command (accepted, dispatched, result) in FleetEventBatches, one per
    callback, as its log's commits would be if nothing else were in flight: accepted and
    dispatched together, then result. Nine messages per command.

What bench_orchestrator.py measures through it is what rclpy and DDS alone cost for this
pattern on this machine: the ceiling the real pipeline is compared to.

    python bench/bare_pipeline.py orchestrator --robots amr_1,amr_2
    python bench/bare_pipeline.py agents --robots amr_1,amr_2
    python bench/bare_pipeline.py world
"""

from __future__ import annotations

import argparse
import contextlib

import rclpy
from rclpy.client import Client
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy

from fleet_idempotency.msg import CommandResult, FleetCommand, FleetEvent, FleetEventBatch
from fleet_idempotency.ros.qos import drop_default_event_handlers
from fleet_idempotency.srv import SubmitCommand, WorldAction

ROOT = "/bench/bare"
SUBMIT_SERVICE = f"{ROOT}/submit_command"
EVENTS_TOPIC = f"{ROOT}/events"
RESULTS_TOPIC = f"{ROOT}/results"
WORLD_SERVICE = f"{ROOT}/world/act"
QOS = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
COMPLETED = 3


def commands_topic(robot_id: str) -> str:
    return f"{ROOT}/{robot_id}/commands"


class BareOrchestrator(Node):
    def __init__(self, robots: list[str]) -> None:
        super().__init__("bare_orchestrator", start_parameter_services=False)
        self._events = self.create_publisher(FleetEventBatch, EVENTS_TOPIC, QOS)
        self._commands = {
            robot: self.create_publisher(FleetCommand, commands_topic(robot), QOS)
            for robot in robots
        }
        self.create_service(SubmitCommand, SUBMIT_SERVICE, self._on_submit, qos_profile=QOS)
        self.create_subscription(CommandResult, RESULTS_TOPIC, self._on_result, QOS)

    def _events_of(self, kinds: list[str], key: str, client_id: str, robot_id: str) -> None:
        self._events.publish(
            FleetEventBatch(
                events=[
                    FleetEvent(
                        event_type=kind, idempotency_key=key, client_id=client_id, robot_id=robot_id
                    )
                    for kind in kinds
                ]
            )
        )

    def _on_submit(
        self, request: SubmitCommand.Request, response: SubmitCommand.Response
    ) -> SubmitCommand.Response:
        key, client, robot = request.idempotency_key, request.client_id, request.robot_id
        self._commands[robot].publish(
            FleetCommand(
                idempotency_key=key,
                client_id=client,
                robot_id=robot,
                command_type=request.command_type,
                payload_json=request.payload_json,
                attempt=1,
            )
        )
        self._events_of(["accepted", "dispatched"], key, client, robot)
        response.state = 1
        response.status_code = 202
        return response

    def _on_result(self, result: CommandResult) -> None:
        if result.state == COMPLETED:
            self._events_of(["result"], result.idempotency_key, result.client_id, result.robot_id)


class BareAgent(Node):
    def __init__(self, robot_id: str, world: Client) -> None:
        super().__init__(f"bare_agent_{robot_id}", start_parameter_services=False)
        self._robot_id = robot_id
        self._results = self.create_publisher(CommandResult, RESULTS_TOPIC, QOS)
        self._world = world
        self.create_subscription(FleetCommand, commands_topic(robot_id), self._on_command, QOS)

    def _on_command(self, command: FleetCommand) -> None:
        self._answer(command, state=1, status_code=202)  # claimed: the real agent's ack
        future = self._world.call_async(
            WorldAction.Request(
                robot_id=self._robot_id, idempotency_key=command.idempotency_key, action="dock"
            )
        )
        future.add_done_callback(lambda _done: self._answer(command, COMPLETED, 200))

    def _answer(self, command: FleetCommand, state: int, status_code: int) -> None:
        self._results.publish(
            CommandResult(
                idempotency_key=command.idempotency_key,
                client_id=command.client_id,
                robot_id=self._robot_id,
                command_type=command.command_type,
                state=state,
                status_code=status_code,
                attempt=command.attempt,
            )
        )


def _act(request: WorldAction.Request, response: WorldAction.Response) -> WorldAction.Response:
    response.success = True
    return response


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=["orchestrator", "agents", "world"])
    parser.add_argument("--robots", default="")
    options = parser.parse_args()
    robots = [robot for robot in options.robots.split(",") if robot]
    rclpy.init()
    executor = SingleThreadedExecutor()
    nodes: list[Node] = []
    if options.role == "orchestrator":
        nodes.append(BareOrchestrator(robots))
    elif options.role == "agents":
        # One world client per process, as the agents of a host share one world link.
        link = Node("bare_world_link", start_parameter_services=False)
        world = link.create_client(WorldAction, WORLD_SERVICE, qos_profile=QOS)
        nodes += [link, *(BareAgent(robot, world) for robot in robots)]
    else:
        world = Node("bare_world", start_parameter_services=False)
        world.create_service(WorldAction, WORLD_SERVICE, _act, qos_profile=QOS)
        nodes.append(world)
    for node in nodes:
        # As the fleet's nodes: rclpy's default QoS event handlers only log, and the
        # executor walks them all on every wake-up; a ceiling that kept them would be low.
        drop_default_event_handlers(node)
        executor.add_node(node)
    with contextlib.suppress(KeyboardInterrupt, ExternalShutdownException):
        executor.spin()


if __name__ == "__main__":
    main()
