"""The ``vda5050`` backend's parameters (``backend_params.*`` in the fleet file)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator, model_validator

from fleet_idempotency.description.fleet import load_fleet
from fleet_idempotency.description.layout import WorldConfig
from fleet_idempotency.vda5050.mqtt import BrokerSettings
from fleet_idempotency.vda5050.wire import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_DEPTH,
    check_topic_level,
    major_version_of,
)


class Vda5050Params(BrokerSettings):
    """Broker (host, port, credentials, TLS files: ``BrokerSettings``), the vehicle's topic
    levels, the protocol version, the map, and how patiently orders are re-sent and the
    vehicle is asked for its factsheet and state. docs/backends.md lists each one."""

    interface_name: str = "uagv"
    # The protocol version the vehicle speaks (2.0.0, 2.1.0 or 3.0.0): written in every
    # header, and it decides the messages' layout. The topic's version level follows it
    # (v2, v3) unless ``major_version`` says otherwise.
    protocol_version: str = Field(default="2.1.0", pattern=r"^[23]\.\d+\.\d+$")
    major_version: str = ""
    manufacturer: str
    serial_number: str
    # The vehicle's map of the fleet's layout: every order's nodes name it, and a vehicle
    # on another map refuses them.
    map_id: str = "warehouse"
    # Where the named targets (waypoints, docks, slots) are: the fleet file's layout, or
    # the layout given inline. One of them is needed for named targets.
    fleet_file: str = ""
    layout: WorldConfig | None = None
    # The vehicle's docking action: the first of these its factsheet offers on nodes.
    dock_action_types: tuple[str, ...] = ("dock", "startCharging")
    # An order not yet shown in ``state`` is re-published this often (QoS 0 loses messages).
    resend_period_s: float = Field(default=0.5, gt=0, le=60)
    # An order neither shown nor refused by then is no longer sent; once a state published
    # after the last copy still does not show it, the command is refused (504, key
    # released: nothing ran). A vehicle that drops what it cannot read says nothing.
    accept_timeout_s: float = Field(default=30.0, gt=0, le=3600)
    # A factsheet or state asked for and not received is asked for again this often.
    request_period_s: float = Field(default=2.0, gt=0, le=60)
    # How near a node the vehicle must be for it to count as reached, in every order's
    # nodes: the start node (where the vehicle stands) and the target, where the vehicle
    # must report itself within it for the command to be COMPLETED.
    allowed_deviation_xy: float = Field(default=0.5, gt=0)
    max_message_bytes: int = Field(default=DEFAULT_MAX_BYTES, ge=1024)
    max_json_depth: int = Field(default=DEFAULT_MAX_DEPTH, ge=4, le=256)

    @field_validator("interface_name", "manufacturer", "serial_number")
    @classmethod
    def _topic_level(cls, value: str) -> str:
        return check_topic_level("topic level", value)

    @model_validator(mode="after")
    def _major_version(self) -> Vda5050Params:
        if not self.major_version:
            object.__setattr__(self, "major_version", major_version_of(self.protocol_version))
        check_topic_level("major_version", self.major_version)
        return self

    @model_validator(mode="after")
    def _one_layout(self) -> Vda5050Params:
        if self.fleet_file and self.layout is not None:
            raise ValueError("give fleet_file or layout, not both")
        if self.fleet_file and not Path(self.fleet_file).is_file():
            raise ValueError(f"fleet_file {self.fleet_file!r} does not exist")
        return self

    def world_layout(self) -> WorldConfig:
        if self.layout is not None:
            return self.layout
        if self.fleet_file:
            return load_fleet(Path(self.fleet_file)).world
        return WorldConfig()
