"""The ``vda5050`` backend's parameters (``backend_params.*`` in the fleet file)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator, model_validator

from fleet_idempotency.description.fleet import load_fleet
from fleet_idempotency.description.layout import WorldConfig
from fleet_idempotency.vda5050.mqtt import BrokerSettings
from fleet_idempotency.vda5050.wire import DEFAULT_MAX_BYTES, DEFAULT_MAX_DEPTH, check_topic_level


class Vda5050Params(BrokerSettings):
    """Broker (host, port, credentials, TLS files: ``BrokerSettings``), the vehicle's topic
    levels, the protocol version, the map, and how patiently orders are re-sent."""

    interface_name: str = "uagv"
    major_version: str = "v2"
    # The version written in every header; 2.1.0 by default, 3.0.0 where configured.
    protocol_version: str = Field(default="2.1.0", pattern=r"^[23]\.\d+\.\d+$")
    manufacturer: str
    serial_number: str
    map_id: str = "warehouse"
    # Where the named targets (waypoints, docks, slots) are: the fleet file's layout, or
    # the layout given inline. One of them is needed for named targets.
    fleet_file: str = ""
    layout: WorldConfig | None = None
    # The vehicle's docking action: the first of these its factsheet offers on nodes.
    dock_action_types: tuple[str, ...] = ("dock", "startCharging")
    # An order not yet shown in ``state`` is re-published this often (QoS 0 loses messages).
    resend_period_s: float = Field(default=0.5, gt=0, le=60)
    # A first node within this distance counts as reached (the vehicle's own position).
    allowed_deviation_xy: float = Field(default=0.5, gt=0)
    max_message_bytes: int = Field(default=DEFAULT_MAX_BYTES, ge=1024)
    max_json_depth: int = Field(default=DEFAULT_MAX_DEPTH, ge=4, le=256)

    @field_validator("interface_name", "major_version", "manufacturer", "serial_number")
    @classmethod
    def _topic_level(cls, value: str) -> str:
        return check_topic_level("topic level", value)

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
