"""VDA 5050 on the wire: topics, headers, bounded decoding, the messages' shapes, and the
MQTT client settings, shared by the ``vda5050`` backend (``robots/vda5050``, master
control's side) and the simulated vehicle (``sim/vda5050_vehicle.py``, the vehicle's
side). No ROS, no robot, no simulator here: a layer below both (.importlinter).
"""
