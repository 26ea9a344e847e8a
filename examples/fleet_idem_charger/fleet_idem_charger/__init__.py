"""A charging station as a fleet_idempotency robot backend (the worked example)."""
