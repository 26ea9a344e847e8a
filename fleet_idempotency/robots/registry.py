"""Find a robot backend by name, check it, and build it with validated parameters.

A backend is named either by an entry point in the ``fleet_idempotency.robot_backends``
group (how an installed distribution registers one, as ros2cli finds its verbs), or as
``module:Class`` (code on the Python path that is not installed as a distribution).
The package's own ``simulated`` and ``gazebo`` backends register the same way as
anyone else's (setup.py). Every way this can go wrong is a ``BackendError`` whose one
line names the backend and the cause: it is a start-up error the agent reports and
exits 1 on, never a traceback.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import sys
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from pydantic import BaseModel, ValidationError

from fleet_idempotency.robots.backend import (
    SUPPORTED_INTERFACE_VERSIONS,
    BackendContext,
    RobotBackend,
)

ENTRY_POINT_GROUP = "fleet_idempotency.robot_backends"


class BackendError(ValueError):
    """A backend that cannot be used: not found, not importable, not a backend, built
    for another interface version, or given parameters it refuses."""


def available_backends() -> dict[str, EntryPoint]:
    """Installed backends by name."""
    return dict(_installed_backends(tuple(sys.path)))


@functools.cache
def _installed_backends(search_path: tuple[str, ...]) -> tuple[tuple[str, EntryPoint], ...]:
    # Reading every distribution's metadata took 18 ms, twice per agent: 11 s of a
    # 300-agent host's start-up. What is installed changes only with the search path.
    del search_path  # the cache key
    return tuple((point.name, point) for point in entry_points(group=ENTRY_POINT_GROUP))


def load_backend_class(name: str) -> type[RobotBackend]:
    """The class registered as ``name``, or named by ``module:Class``, checked."""
    if not name:
        raise BackendError("no backend named (parameter 'backend' is empty)")
    if ":" in name:
        module_name, _, attribute = name.partition(":")
        try:
            module = importlib.import_module(module_name)
        except Exception as error:  # an import error of any kind is the plug-in's fault
            raise BackendError(
                f"backend {name!r}: cannot import {module_name!r}: {error!r}"
            ) from None
        loaded = _attribute(module, attribute)
        if loaded is None:
            raise BackendError(f"backend {name!r}: module {module_name!r} has no {attribute!r}")
    else:
        installed = available_backends()
        point = installed.get(name)
        if point is None:
            known = ", ".join(sorted(installed)) or "none"
            raise BackendError(
                f"backend {name!r} not found: no entry point of that name in group "
                f"{ENTRY_POINT_GROUP!r} (installed: {known}), and not a 'module:Class'"
            )
        try:
            loaded = point.load()
        except Exception as error:
            raise BackendError(
                f"backend {name!r} ({point.value}) failed to import: {error!r}"
            ) from None
    return check_backend_class(name, loaded)


def _attribute(module: object, dotted: str) -> Any:
    found: Any = module
    for part in dotted.split("."):
        found = getattr(found, part, None)
        if found is None:
            return None
    return found


def check_backend_class(name: str, loaded: object) -> type[RobotBackend]:
    if not (isinstance(loaded, type) and issubclass(loaded, RobotBackend)):
        raise BackendError(
            f"backend {name!r} is {loaded!r}, not a subclass of "
            "fleet_idempotency.robots.backend.RobotBackend"
        )
    version = getattr(loaded, "interface_version", None)
    if version is None:
        raise BackendError(
            f"backend {name!r} ({loaded.__qualname__}) does not declare interface_version; "
            f"this agent implements version(s) {sorted(SUPPORTED_INTERFACE_VERSIONS)}"
        )
    if version not in SUPPORTED_INTERFACE_VERSIONS:
        raise BackendError(
            f"backend {name!r} ({loaded.__qualname__}) was built for backend interface "
            f"version {version}; this agent implements version(s) "
            f"{sorted(SUPPORTED_INTERFACE_VERSIONS)}"
        )
    if not (isinstance(loaded.Params, type) and issubclass(loaded.Params, BaseModel)):
        raise BackendError(f"backend {name!r}: Params must be a pydantic model")
    return loaded


def validate_params(name: str, backend: type[RobotBackend], values: dict[str, Any]) -> BaseModel:
    """``values`` validated by the backend's model; an error names each bad field as
    ``backend_params.<field>``."""
    try:
        return backend.Params.model_validate(values)
    except ValidationError as error:
        problems = "; ".join(
            "backend_params."
            + (".".join(str(part) for part in item["loc"]) or "(all)")
            + f": {item['msg']}"
            for item in error.errors()
        )
        raise BackendError(f"backend {name!r}: invalid parameters: {problems}") from None


def decode_param_values(backend: type[RobotBackend], values: dict[str, Any]) -> dict[str, Any]:
    """Values that came through ROS parameters, where a structured field (a list of
    objects, a mapping) can only travel as a JSON string: decode those."""
    decoded = dict(values)
    for name, value in values.items():
        field = backend.Params.model_fields.get(name)
        if field is None or not isinstance(value, str) or field.annotation is str:
            continue
        if value[:1] in ("{", "["):
            # Left as it is if it is not JSON: validation then says what is wrong with it.
            with contextlib.suppress(ValueError):
                decoded[name] = json.loads(value)
    return decoded


def make_backend(name: str, values: dict[str, Any], context: BackendContext) -> RobotBackend:
    """The backend ``name`` for this robot, built with ``values`` as its parameters."""
    backend = load_backend_class(name)
    if backend.robot_types is not None and context.robot_type not in backend.robot_types:
        raise BackendError(
            f"backend {name!r} drives robot types {sorted(backend.robot_types)}, "
            f"not {context.robot_type!r}"
        )
    params = validate_params(name, backend, decode_param_values(backend, values))
    try:
        return backend(context, params)
    except BackendError:
        raise
    except (ValueError, TypeError) as error:
        raise BackendError(f"backend {name!r} refused to start: {error}") from None
