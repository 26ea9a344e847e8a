"""Simulation of the warehouse world (no ROS imports)."""
