"""What every node of the package shares with ROS 2.

- ``qos``: the quality-of-service profiles of every endpoint.
- ``convert``: generated messages <-> the transport-neutral forms of ``protocol``.
- ``node_main``: the shared ``main()`` body (spin, clean shutdown, clear start-up errors).
- ``entry_points``: the node executables; they route stop signals before rclpy loads.
- ``stop_signals``: SIGINT/SIGTERM stop a node once and cleanly (no rclpy import).
- ``guard``: exception barriers for every callback (no rclpy import).
- ``parent_watch``: a node started by ``fleet-idem`` exits when it dies (no rclpy import).
- ``teardown_backstop``: a DDS participant teardown that deadlocks ends in exit 0 (no
  rclpy import).
- ``fleet_client``: a client of the fleet's API, as a warehouse system would use it.
- ``dds_isolation``: keep one run's DDS traffic away from other runs on the same machine
  (no rclpy import).

Nothing is re-exported: importing this package must not load rclpy.
"""
