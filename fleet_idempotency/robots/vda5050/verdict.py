"""What the vehicle's ``state`` says of one order: a pure function, tested on its own.

- Our order is the state's ``orderId`` (with ``orderUpdateId`` 0):
  an action of ours FAILED, or an error of level FATAL that concerns the order -> FAILED
  (the vehicle's error text); nodes or edges left, or an action of ours not ended ->
  RUNNING (2.1 section 6.10.1: the states list what is still to do); nothing left -> the
  vehicle's word on where it ended: at the target node (``lastNodeId``) and, when it
  reports its position, within the allowed deviation of it, every action of ours
  FINISHED -> COMPLETED; anywhere else -> FAILED, saying where and why (a ``cancelOrder``
  empties the node states and keeps ``lastNodeId`` where the vehicle stopped, 2.1
  section 6.6.3: never a completion).
- Another ``orderId``: an error of a refusal type (2.1 section 6.6.4; 3.0 section 6.1.4)
  that references our ``orderId`` -> REFUSED (the vehicle did not take the order over:
  it keeps its previous one); otherwise NOT_CURRENT (not received yet, lost, or gone).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from fleet_idempotency.robots.vda5050.orders import OrderPlan
from fleet_idempotency.vda5050.messages import REFUSAL_ERROR_TYPES, Error, State


class Phase(Enum):
    NOT_CURRENT = "not_current"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    REFUSED = "refused"


@dataclass(frozen=True)
class Verdict:
    phase: Phase
    message: str = ""
    error_type: str = ""


def _concerns(error: Error, plan: OrderPlan) -> bool:
    orders = error.references("orderId")
    actions = error.references("actionId")
    if plan.order_id in orders or any(a in plan.action_ids for a in actions):
        return True
    return not orders and not actions  # a vehicle-wide error concerns what it is doing


def judge(state: State | None, plan: OrderPlan) -> Verdict:
    if state is None:
        return Verdict(Phase.NOT_CURRENT)
    if state.orderId != plan.order_id or state.orderUpdateId != 0:
        for error in state.errors:
            if error.errorType in REFUSAL_ERROR_TYPES and plan.order_id in error.references(
                "orderId"
            ):
                return Verdict(Phase.REFUSED, error.text(), error.errorType)
        return Verdict(Phase.NOT_CURRENT)
    for action_id in plan.action_ids:
        action = state.action(action_id)
        if action is not None and action.actionStatus == "FAILED":
            related = [
                e.text()
                for e in state.errors
                if action_id in e.references("actionId") or plan.order_id in e.references("orderId")
            ]
            text = "; ".join(related) or action.result() or "no reason given"
            return Verdict(Phase.FAILED, f"{action.actionType or action_id} failed: {text}")
    fatal = [e for e in state.errors if e.errorLevel == "FATAL" and _concerns(e, plan)]
    if fatal:
        return Verdict(Phase.FAILED, "; ".join(e.text() for e in fatal))
    ours = [state.action(a) for a in plan.action_ids]
    ended = all(a is not None and a.actionStatus in ("FINISHED", "FAILED") for a in ours)
    if state.nodeStates or state.edgeStates or not ended:
        return Verdict(Phase.RUNNING)
    if state.lastNodeId != plan.target:
        return Verdict(
            Phase.FAILED,
            f"order {plan.order_id!r} ended at node {state.lastNodeId or 'none'!r}, not at "
            f"its target {plan.target!r}: {_why_it_ended(state)}",
        )
    position = state.position()
    if plan.target_xy is not None and position is not None:
        off = math.hypot(position.x - plan.target_xy[0], position.y - plan.target_xy[1])
        if off > plan.deviation_xy:
            return Verdict(
                Phase.FAILED,
                f"order {plan.order_id!r} ended at its target node {plan.target!r} but the "
                f"vehicle reports itself {off:.2f} m from it (allowed {plan.deviation_xy} m)",
            )
    return Verdict(Phase.COMPLETED)


def _why_it_ended(state: State) -> str:
    cancels = [
        a.actionId
        for a in (*state.actionStates, *state.instantActionStates)
        if a.actionType == "cancelOrder" and a.actionStatus in ("RUNNING", "FINISHED")
    ]
    if cancels:
        return f"cancelled at the vehicle (cancelOrder {cancels[-1]!r})"
    return "the vehicle dropped the rest of the order"
