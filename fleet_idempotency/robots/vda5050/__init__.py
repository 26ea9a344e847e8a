"""The ``vda5050`` backend: one VDA 5050 vehicle commanded over an MQTT broker.

``params.py`` (what a fleet file says about the vehicle), ``orders.py`` (commands as
orders, ids derived from the key), ``verdict.py`` (what the vehicle's ``state`` says of an
order), ``vehicle_view.py`` (the vehicle as the broker shows it, bad input counted and
ignored), ``backend.py`` (the RobotBackend). docs/design.md, "VDA 5050", says why.
"""
