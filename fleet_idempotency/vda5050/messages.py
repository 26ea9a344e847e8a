# ruff: noqa: N815 - field names are the protocol's own (camelCase JSON keys)
"""The parts of VDA 5050 messages this package reads, as tolerant pydantic models.

Only the fields a reader relies on are declared, with the types the official JSON
schemas give them; anything else a vehicle or master control adds is kept but not read
(``extra="allow"``), so a vendor's extensions pass while a message missing what we rely
on, or carrying it with the wrong type, fails validation ("wrong schema": counted and
ignored by the reader). The tests check every message this package *writes* against the
official schemas themselves (vda5050-sdk), not against these models.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

# 2.x: ONLINE, OFFLINE, CONNECTIONBROKEN; 3.0 renames the last CONNECTION_BROKEN and adds
# HIBERNATING (connected, but sending no state).
ConnectionState = Literal[
    "ONLINE", "OFFLINE", "CONNECTIONBROKEN", "CONNECTION_BROKEN", "HIBERNATING"
]
ActionStatus = Literal[
    "WAITING", "INITIALIZING", "RUNNING", "PAUSED", "RETRIABLE", "FINISHED", "FAILED"
]
BlockingType = Literal["NONE", "SOFT", "HARD", "SINGLE"]

# Error types a vehicle reports when it refuses an order before taking it over (2.1
# section 6.6.4: validationError, orderError, orderUpdateError, noRouteError; 3.0 section
# 6.1.4: VALIDATION_FAILURE, INVALID_ORDER_ACTION, UNSUPPORTED_PARAMETER,
# OUTDATED_ORDER_UPDATE, SAME_ORDER_UPDATE_ID, OTHER_ORDER_ACTIVE, START_NODE_OUT_OF_RANGE,
# NO_ROUTE_TO_TARGET, MOBILE_ROBOT_NOT_AVAILABLE). The vehicle keeps its previous order.
REFUSAL_ERROR_TYPES: Final = frozenset(
    {
        "validationError",
        "orderError",
        "orderUpdateError",
        "noRouteError",
        "VALIDATION_FAILURE",
        "INVALID_ORDER_ACTION",
        "UNSUPPORTED_PARAMETER",
        "OUTDATED_ORDER_UPDATE",
        "SAME_ORDER_UPDATE_ID",
        "OTHER_ORDER_ACTIVE",
        "START_NODE_OUT_OF_RANGE",
        "NO_ROUTE_TO_TARGET",
        "MOBILE_ROBOT_NOT_AVAILABLE",
        "UNKNOWN_MAP",
    }
)


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class Header(_Message):
    headerId: StrictInt = Field(ge=0)
    timestamp: StrictStr
    version: StrictStr
    manufacturer: StrictStr
    serialNumber: StrictStr


class Connection(Header):
    connectionState: ConnectionState


class ActionParameter(_Message):
    key: StrictStr
    value: Any


class Action(_Message):
    actionType: StrictStr
    actionId: StrictStr
    blockingType: BlockingType
    actionDescription: StrictStr | None = None
    actionParameters: list[ActionParameter] = Field(default_factory=list)

    def parameter(self, key: str) -> Any:
        return next((p.value for p in self.actionParameters if p.key == key), None)


class NodePosition(_Message):
    x: float
    y: float
    theta: float | None = None
    mapId: StrictStr
    # 2.x: a distance; 3.0: an ellipse {a, b, theta}.
    allowedDeviationXY: float | dict[str, float] | None = None

    def deviation_xy(self) -> float | None:
        """The allowed distance from the node (3.0: the ellipse's smaller half-axis)."""
        deviation = self.allowedDeviationXY
        if isinstance(deviation, dict):
            return min(deviation.get("a", 0.0), deviation.get("b", 0.0))
        return deviation


class Node(_Message):
    nodeId: StrictStr
    sequenceId: StrictInt = Field(ge=0)
    released: bool
    nodePosition: NodePosition | None = None
    actions: list[Action]


class Edge(_Message):
    edgeId: StrictStr
    sequenceId: StrictInt = Field(ge=0)
    released: bool
    # 2.x only: 3.0 connects edges to nodes by their sequence ids alone.
    startNodeId: StrictStr | None = None
    endNodeId: StrictStr | None = None
    actions: list[Action]


class Order(Header):
    orderId: StrictStr
    orderUpdateId: StrictInt = Field(ge=0)
    nodes: list[Node]
    edges: list[Edge]


class InstantActions(Header):
    actions: list[Action]


class NodeState(_Message):
    nodeId: StrictStr
    sequenceId: StrictInt
    released: bool


class EdgeState(_Message):
    edgeId: StrictStr
    sequenceId: StrictInt
    released: bool


class ActionState(_Message):
    actionId: StrictStr
    actionType: StrictStr | None = None
    actionStatus: ActionStatus
    resultDescription: StrictStr | None = None  # 2.x
    actionResult: StrictStr | None = None  # 3.0

    def result(self) -> str:
        return self.resultDescription or self.actionResult or ""


class ErrorReference(_Message):
    referenceKey: StrictStr
    referenceValue: StrictStr


class Error(_Message):
    errorType: StrictStr
    errorLevel: StrictStr  # WARNING, FATAL (2.1); CRITICAL, URGENT too (3.0)
    errorDescription: StrictStr | None = None
    errorReferences: list[ErrorReference] = Field(default_factory=list)

    def references(self, key: str) -> list[str]:
        return [r.referenceValue for r in self.errorReferences if r.referenceKey == key]

    def text(self) -> str:
        return (
            f"{self.errorType}: {self.errorDescription}"
            if self.errorDescription
            else (self.errorType)
        )


class AgvPosition(_Message):
    """2.x ``agvPosition``; 3.0's ``mobileRobotPosition`` says ``localized`` instead."""

    x: float
    y: float
    theta: float
    mapId: StrictStr
    positionInitialized: bool | None = None
    localized: bool | None = None


class State(Header):
    orderId: StrictStr
    orderUpdateId: StrictInt = Field(ge=0)
    lastNodeId: StrictStr
    lastNodeSequenceId: StrictInt = Field(ge=0)
    nodeStates: list[NodeState]
    edgeStates: list[EdgeState]
    actionStates: list[ActionState]
    errors: list[Error]
    driving: bool
    operatingMode: StrictStr
    agvPosition: AgvPosition | None = None  # 2.x
    mobileRobotPosition: AgvPosition | None = None  # 3.0
    # 3.0 lists instant actions apart; 2.x among ``actionStates``.
    instantActionStates: list[ActionState] = Field(default_factory=list)

    def position(self) -> AgvPosition | None:
        return self.agvPosition or self.mobileRobotPosition

    def idle(self) -> bool:
        """No order in progress (2.1 section 6.6.2, Figure 8 step 3): no nodes left and
        every action FINISHED or FAILED."""
        return (
            not self.nodeStates
            and not self.edgeStates
            and all(a.actionStatus in ("FINISHED", "FAILED") for a in self.actionStates)
        )

    def action(self, action_id: str) -> ActionState | None:
        return next(
            (a for a in (*self.actionStates, *self.instantActionStates) if a.actionId == action_id),
            None,
        )


class AgvAction(_Message):
    actionType: StrictStr
    actionScopes: list[StrictStr]


class ProtocolFeatures(_Message):
    agvActions: list[AgvAction] = Field(default_factory=list)  # 2.x
    mobileRobotActions: list[AgvAction] = Field(default_factory=list)  # 3.0


class Factsheet(_Message):
    manufacturer: StrictStr
    serialNumber: StrictStr
    protocolFeatures: ProtocolFeatures

    def node_actions(self) -> frozenset[str]:
        features = self.protocolFeatures
        return frozenset(
            a.actionType
            for a in (*features.agvActions, *features.mobileRobotActions)
            if "NODE" in a.actionScopes
        )

    def instant_actions(self) -> frozenset[str]:
        features = self.protocolFeatures
        return frozenset(
            a.actionType
            for a in (*features.agvActions, *features.mobileRobotActions)
            if "INSTANT" in a.actionScopes
        )
