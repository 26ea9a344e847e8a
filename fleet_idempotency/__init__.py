"""fleet_idempotency: exactly-once robot fleet commands over ROS 2."""
