"""What the in-process tests (cores joined without ROS) share."""

from __future__ import annotations

from fleet_idempotency.orchestrator.core import OrchestratorSettings

# Retries and offline detection fast enough for in-memory links pumped in a loop.
FAST_ORCHESTRATOR = OrchestratorSettings(
    retry_initial_s=0.05, retry_max_s=0.2, offline_after_s=0.5, busy_pause_s=0.05
)


class QuietLogger:
    """A logger for cores under test: what they log is not what the tests assert."""

    def info(self, message: str) -> None: ...
    def warning(self, message: str) -> None: ...
    def error(self, message: str) -> None: ...
