"""The fleet as an action: ExecuteCommand goals against a real orchestrator, agents and
world simulator, over real DDS. Retries are deduplicated by idempotency key, not by goal
UUID; the world's side-effect count per key is the oracle for "one execution"."""

from __future__ import annotations

import json
import signal
import threading
from typing import Any

from fleet_idempotency.orchestrator.core import robot_key
from fleet_idempotency.ros.qos import RELIABLE_TOPIC_QOS, SERVICE_QOS

from support.fleet_harness import FleetHarness
from support.http_harness import HttpServer, post_command

ACCEPTED, IN_PROGRESS, COMPLETED, REJECTED = 1, 2, 3, 6
SUCCEEDED, CANCELED, ABORTED = 4, 5, 6  # action_msgs/GoalStatus
WITHDRAWN = 499


class GoalSender:
    """Raw ExecuteCommand goals from the harness's node (spun by the test's thread), each
    under a new random goal UUID, as a client retrying by key sends them."""

    def __init__(self, fleet: FleetHarness) -> None:
        from rclpy.action import ActionClient

        from fleet_idempotency.action import ExecuteCommand

        self.fleet = fleet
        self.type = ExecuteCommand
        self.client = ActionClient(
            fleet.node,
            ExecuteCommand,
            "/fleet/execute_command",
            goal_service_qos_profile=SERVICE_QOS,
            result_service_qos_profile=SERVICE_QOS,
            cancel_service_qos_profile=SERVICE_QOS,
            feedback_sub_qos_profile=RELIABLE_TOPIC_QOS,
        )
        self.feedback: dict[bytes, list[Any]] = {}

    def wait_for_server(self) -> None:
        self.fleet.spin_until(self.client.server_is_ready, "the execute_command action server")

    def send(self, client_id: str, key: str, robot_id: str, command_type: str, payload: Any) -> Any:
        """Send one goal; the future of its acceptance."""
        goal = self.type.Goal(
            client_id=client_id,
            idempotency_key=key,
            robot_id=robot_id,
            command_type=command_type,
            payload_json=json.dumps(payload),
        )
        return self.client.send_goal_async(
            goal,
            feedback_callback=lambda m: self.feedback.setdefault(bytes(m.goal_id.uuid), []).append(
                m.feedback
            ),
        )

    def accepted(self, future: Any) -> Any:
        handle = self.fleet.spin_until(lambda: future.done() and future.result(), "an accept")
        assert handle.accepted, "every goal is accepted; refusals are results"
        return handle

    def results(self, handles: list[Any], timeout_s: float = 60.0) -> list[Any]:
        futures = [handle.get_result_async() for handle in handles]
        return self.fleet.spin_until(
            lambda: all(f.done() for f in futures) and [f.result() for f in futures],
            f"results of {len(handles)} goals",
            timeout_s=timeout_s,
        )

    def run(self, *goal: Any, timeout_s: float = 60.0) -> Any:
        return self.results([self.accepted(self.send(*goal))], timeout_s)[0]

    def feedback_of(self, handle: Any) -> list[Any]:
        return self.feedback.get(bytes(handle.goal_id.uuid), [])


def effects(fleet: FleetHarness, client: str, key: str, robot: str) -> int:
    return fleet.side_effects(robot, robot_key(client, key))


def final_fields(result: Any) -> tuple[int, int, str]:
    return (result.state, result.status_code, result.result_json)


def test_twenty_concurrent_goals_of_one_key_run_once_and_agree_with_service_and_http(
    fleet: FleetHarness, http_server: HttpServer
) -> None:
    fleet.start_agent("forklift_1", "forklift", start_x=2.0, start_y=4.0, time_scale=0.2)
    fleet.start_orchestrator()
    goals = GoalSender(fleet)
    goals.wait_for_server()
    pick = ("wms", "order-a1", "forklift_1", "pick", {"slot": "A3"})
    # A goal whose accept the client never reads (a lost accept), then twenty retries at
    # once, each under a new goal UUID.
    goals.send(*pick)
    futures = [goals.send(*pick) for _ in range(20)]
    handles = [goals.accepted(future) for future in futures]
    assert len({bytes(h.goal_id.uuid) for h in handles}) == 20
    responses = goals.results(handles)

    assert {r.status for r in responses} == {SUCCEEDED}
    results = [r.result for r in responses]
    assert len({final_fields(r) for r in results}) == 1, [final_fields(r) for r in results]
    state, code, body = final_fields(results[0])
    assert (state, code) == (COMPLETED, 200) and json.loads(body)["item"] == "P-3"
    # The lost-accept goal may own the command; the twenty here attached to it at most once.
    assert sum(not r.replayed for r in results) <= 1
    assert effects(fleet, "wms", "order-a1", "forklift_1") == 1
    # Feedback followed the state changes (the last one, the final state, is published
    # just before the result, and rclpy's client drops feedback once it has the result).
    for handle in handles:
        states = [f.state for f in goals.feedback_of(handle)]
        assert states and set(states) <= {ACCEPTED, IN_PROGRESS, COMPLETED}, states

    # A late retry over the action, over SubmitCommand and over HTTP: one intent, one answer.
    late = goals.run(*pick)
    assert late.status == SUCCEEDED and late.result.replayed
    assert final_fields(late.result) == (state, code, body)
    service = fleet.submit(*pick)
    assert (service.state, service.status_code, service.result_json) == (state, code, body)
    assert service.replayed
    http_server.start()
    with http_server.client() as client:
        answer = post_command(client, "forklift_1", "order-a1", "pick", {"slot": "A3"})
    assert answer.status_code == 200 and answer.headers["idempotent-replayed"] == "true"
    assert answer.json()["result"] == json.loads(body)
    # The same key for another command is refused, as SubmitCommand refuses it.
    other = goals.run("wms", "order-a1", "forklift_1", "pick", {"slot": "A4"})
    assert other.status == ABORTED and other.result.status_code == 422, other.result
    assert "fingerprint" in other.result.message
    assert effects(fleet, "wms", "order-a1", "forklift_1") == 1


def test_goal_retried_after_orchestrator_kill_9_attaches_to_the_same_command(
    fleet: FleetHarness,
) -> None:
    from fleet_idempotency.ros.fleet_client import FleetClient

    fleet.start_agent("amr_1", "amr", time_scale=0.3)
    fleet.start_orchestrator()
    # A client that retries by key: its goal to the killed orchestrator is never answered,
    # the new orchestrator's boot id makes it send a new goal (new UUID, same key).
    client = FleetClient(fleet.node.context, "action_client", first_resend_s=600.0)
    try:
        executed: list[Any] = []
        move = ("wms", "k-action-restart", "amr_1", "move_to_waypoint", {"waypoint": "W3"})
        waiting = threading.Thread(
            target=lambda: executed.append(client.execute(*move, patience_s=600.0))
        )
        waiting.start()
        fleet.spin_until(
            lambda: fleet.statuses["amr_1"].current_key == robot_key("wms", "k-action-restart"),
            "the move to be under way",
        )
        fleet.children.kill("orchestrator", signal.SIGKILL)
        fleet.start_orchestrator()
        waiting.join(timeout=90.0)
        assert executed, "no result: the client did not send a new goal to the new orchestrator"
        (first,) = executed
        assert first.goals == 2 and first.status == SUCCEEDED, first
        assert first.result.state == COMPLETED and first.result.replayed
        again = client.execute(*move)
        assert again.goals == 1 and again.result.replayed
        assert final_fields(again.result) == final_fields(first.result)
        assert effects(fleet, "wms", "k-action-restart", "amr_1") == 1
    finally:
        client.close()


def test_cancel_withdraws_before_dispatch_and_is_refused_with_the_reason_after(
    fleet: FleetHarness,
) -> None:
    fleet.start_agent("amr_1", "amr", time_scale=0.3)
    fleet.start_orchestrator()
    goals = GoalSender(fleet)
    goals.wait_for_server()
    # amr_2 has no agent: its command stays queued at the orchestrator, never sent.
    queued = goals.accepted(goals.send("wms", "k-queued", "amr_2", "dock", {"dock": "D2"}))
    fleet.spin_until(lambda: goals.feedback_of(queued), "the goal's first feedback")
    cancel = queued.cancel_goal_async()
    response = fleet.spin_until(lambda: cancel.done() and cancel.result(), "the cancel")
    assert len(response.goals_canceling) == 1
    (result,) = goals.results([queued])
    assert result.status == CANCELED
    assert (result.result.state, result.result.status_code) == (REJECTED, WITHDRAWN)
    check = fleet.fleet_check("wms", "k-queued")
    assert not check.found and check.status_code == WITHDRAWN, check
    # Released: the same key may be submitted again (and is claimed afresh).
    assert fleet.submit("wms", "k-queued", "amr_2", "dock", {"dock": "D2"}).status_code == 202

    # Sent to its robot: the cancel is refused, the reason comes as feedback, and the
    # command runs to its end.
    running = goals.accepted(
        goals.send("wms", "k-running", "amr_1", "move_to_waypoint", {"waypoint": "W3"})
    )
    fleet.spin_until(
        lambda: any(f.state == IN_PROGRESS for f in goals.feedback_of(running)),
        "the command to be sent to its robot",
    )
    cancel = running.cancel_goal_async()
    response = fleet.spin_until(lambda: cancel.done() and cancel.result(), "the cancel")
    assert not response.goals_canceling
    refusal = fleet.spin_until(
        lambda: next(
            (f for f in goals.feedback_of(running) if f.message.startswith("cancel refused")),
            None,
        ),
        "the reason the cancel was refused",
    )
    assert "already sent to amr_1" in refusal.message
    (result,) = goals.results([running])
    assert result.status == SUCCEEDED and result.result.state == COMPLETED
    assert effects(fleet, "wms", "k-running", "amr_1") == 1
