"""The fleet's HTTP front door: the Unified Control API over HTTP, a live page, metrics.

Its own node process (``http_api``): a FastAPI app (``app.py``, plain Python) in front of a
ROS node (``node.py``) that calls the orchestrator's public services and follows its
public topics. It never imports the orchestrator's internals.
"""
