"""Robot backends: the interface the agent drives, and simulated robots behind it."""
