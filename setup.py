"""Build of the fleet_idempotency ROS 2 package (ament_python).

The Python modules are an ordinary setuptools package. The .msg/.srv/.action interfaces need
rosidl, which only runs under CMake, so ``build_py`` is extended with one step: write a
tiny CMake project next to the build, let ``rosidl_generate_interfaces`` produce the C
type support and the Python bindings, and fold the results into the build:

* ``<pkg>/msg``, ``<pkg>/srv``, ``<pkg>/action`` and the ``*_s__rosidl_typesupport_*.so``
  extension modules go beside the hand-written modules, so ``import fleet_idempotency.msg`` works;
* ``lib/lib<pkg>__rosidl_*.so``, ``share/`` and ``include/`` are installed as data files,
  which is where ``pip`` (venv root) and ``colcon`` (``install/<pkg>``) expect them.

The same setup.py therefore serves ``pip install .`` in a venv with ROS 2 from PyPI and
``colcon build`` in a ROS workspace. Generation output is cached by a hash of the
interface files, so rebuilding after a Python-only change skips CMake.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

PACKAGE = "fleet_idempotency"
ROOT = Path(__file__).resolve().parent
INTERFACE_FILES = sorted(
    [p.relative_to(ROOT).as_posix() for p in (ROOT / "msg").glob("*.msg")]
    + [p.relative_to(ROOT).as_posix() for p in (ROOT / "srv").glob("*.srv")]
    + [p.relative_to(ROOT).as_posix() for p in (ROOT / "action").glob("*.action")]
)
# action_msgs (with unique_identifier_msgs) is what rosidl needs for .action files.
INTERFACE_DEPENDENCIES = ["builtin_interfaces", "action_msgs"]

CMAKE_PROJECT = """\
cmake_minimum_required(VERSION 3.20)
project({package} C CXX)
find_package(ament_cmake REQUIRED)
find_package(rosidl_default_generators REQUIRED)
{find_dependencies}
ament_package_xml(DIRECTORY "{root}")
rosidl_generate_interfaces({package}
  {interfaces}
  DEPENDENCIES {dependencies})
# The PyPI ROS wheels export targets whose include path points at the manylinux build
# image (/opt/python/...); CMake refuses non-existent include dirs, so drop them.
get_directory_property(imported_targets IMPORTED_TARGETS)
foreach(target IN LISTS imported_targets)
  get_target_property(include_dirs ${{target}} INTERFACE_INCLUDE_DIRECTORIES)
  if(include_dirs)
    list(FILTER include_dirs EXCLUDE REGEX "^/opt/python/")
    set_target_properties(${{target}} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${{include_dirs}}")
  endif()
endforeach()
"""


def _prefix() -> str:
    # Under colcon, sys.prefix is the workspace install dir; the ROS packages live in the
    # interpreter's real prefix (the venv, or /opt/ros/<distro> through AMENT_PREFIX_PATH).
    return str(getattr(sys, "real_prefix", sys.prefix))


def _cmake_env() -> dict[str, str]:
    env = dict(os.environ)
    for var in ("AMENT_PREFIX_PATH", "CMAKE_PREFIX_PATH"):
        parts = [_prefix(), *filter(None, env.get(var, "").split(os.pathsep))]
        env[var] = os.pathsep.join(dict.fromkeys(parts))
    # pip's isolated build env would shadow the venv's ROS Python packages (rosidl_*).
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and "pip-build-env" not in p
    )
    return env


def _interfaces_hash() -> str:
    digest = hashlib.sha256()
    for name in [*INTERFACE_FILES, "package.xml"]:
        digest.update(name.encode())
        digest.update((ROOT / name).read_bytes())
    digest.update(CMAKE_PROJECT.encode())
    digest.update(sys.version.encode())
    digest.update(_prefix().encode())
    return digest.hexdigest()[:16]


def generate_interfaces(work_dir: Path) -> Path:
    """Run rosidl through CMake once per interface hash; return the install prefix."""
    staging = work_dir / f"rosidl-{_interfaces_hash()}"
    done_marker = staging / ".complete"
    if done_marker.exists():
        return staging / "install"
    if shutil.which("cmake") is None:
        sys.exit("fleet_idempotency: cmake (>= 3.20) is needed to generate the ROS interfaces")
    shutil.rmtree(staging, ignore_errors=True)
    source, build, install = staging / "src", staging / "build", staging / "install"
    source.mkdir(parents=True)
    (source / "CMakeLists.txt").write_text(
        CMAKE_PROJECT.format(
            package=PACKAGE,
            root=ROOT.as_posix(),
            interfaces="\n  ".join(f'"{ROOT.as_posix()}:{name}"' for name in INTERFACE_FILES),
            dependencies=" ".join(INTERFACE_DEPENDENCIES),
            find_dependencies="\n".join(
                f"find_package({dep} REQUIRED)" for dep in INTERFACE_DEPENDENCIES
            ),
        )
    )
    env = _cmake_env()
    steps = [
        [
            "cmake",
            "-S",
            str(source),
            "-B",
            str(build),
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython3_EXECUTABLE={sys.executable}",
            "-DBUILD_TESTING=OFF",
        ],
        ["cmake", "--build", str(build), "--parallel", str(os.cpu_count() or 2)],
        ["cmake", "--install", str(build), "--prefix", str(install)],
    ]
    for step in steps:
        print("fleet_idempotency: " + " ".join(step), flush=True)
        subprocess.run(step, check=True, env=env)
    done_marker.touch()
    return install


def _generated_python_package(install: Path) -> Path:
    found = sorted(install.glob(f"lib/python3*/site-packages/{PACKAGE}"))
    if not found:
        raise RuntimeError(f"rosidl produced no Python package under {install}")
    return found[0]


class BuildPyWithInterfaces(build_py):
    """build_py that also generates and bundles the ROS interfaces."""

    def run(self) -> None:
        super().run()
        install = generate_interfaces(Path(self.build_lib).resolve().parent / "rosidl")
        target = Path(self.build_lib) / PACKAGE
        for item in _generated_python_package(install).iterdir():
            # The generated __init__.py is empty and would replace ours; the .c files are
            # intermediate sources of the extension modules.
            if item.name == "__init__.py" or item.suffix == ".c":
                continue
            destination = target / item.name
            if item.is_dir():
                shutil.copytree(item, destination, dirs_exist_ok=True)
            else:
                shutil.copy2(item, destination)
        self._add_native_data_files(install)

    def _add_native_data_files(self, install: Path) -> None:
        groups: dict[str, list[str]] = {}
        for path in sorted(install.rglob("*")):
            relative = path.relative_to(install)
            if not path.is_file() or relative.parts[0] not in ("lib", "share", "include"):
                continue
            if relative.parts[0] == "lib" and "site-packages" in relative.parts:
                continue
            groups.setdefault(relative.parent.as_posix(), []).append(str(path))
        install_data = self.distribution.get_command_obj("install_data")
        install_data.data_files = list(install_data.data_files or []) + sorted(groups.items())


class PlatformDistribution(Distribution):
    """The package ships compiled type support, so its wheel is platform-specific."""

    def has_ext_modules(self) -> bool:
        return True


setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(include=[PACKAGE, f"{PACKAGE}.*"]),
    # The fleet page (plain HTML/JS/CSS) is served from the installed package.
    package_data={f"{PACKAGE}.http": ["static/*"]},
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", sorted(str(p) for p in Path("launch").glob("*.py"))),
        (f"share/{PACKAGE}/config", sorted(str(p) for p in Path("config").glob("*.yaml"))),
    ],
    install_requires=[
        "setuptools",
        "lmdb",
        "pydantic>=2",
        "PyYAML",
        "fastapi",
        "uvicorn",
        "prometheus-client",
        # The shared PostgreSQL event log; imported only when a postgresql:// URL is used.
        "psycopg>=3.1",
        "psycopg-pool>=3.2",
        # VDA 5050 vehicles over MQTT (robots/vda5050, sim/vda5050_vehicle.py).
        "paho-mqtt>=2.1,<3",
    ],
    zip_safe=False,
    maintainer="fleet_idempotency maintainers",
    maintainer_email="fleet-idempotency@example.com",
    description="Exactly-once robot fleet commands over ROS 2 with durable idempotency keys",
    license="Apache-2.0",
    python_requires=">=3.11",
    tests_require=["pytest"],
    cmdclass={"build_py": BuildPyWithInterfaces},
    distclass=PlatformDistribution,
    entry_points={
        "console_scripts": [
            # Through entry_points: stop signals are routed before the node's modules load.
            "agent_driver = fleet_idempotency.ros.entry_points:agent_driver",
            "orchestrator = fleet_idempotency.ros.entry_points:orchestrator",
            "agent_host = fleet_idempotency.ros.entry_points:agent_host",
            "world_simulator = fleet_idempotency.ros.entry_points:world_simulator",
            "http_api = fleet_idempotency.ros.entry_points:http_api",
            "vda5050_vehicle = fleet_idempotency.sim.vda5050_vehicle:main",
            "fleet-idem = fleet_idempotency.bringup.cli:main",
            "fleet-idem-store = fleet_idempotency.store.cli:main",
            "fleet-idem-events = fleet_idempotency.events.cli:main",
        ],
        # Robot backends (robots/registry.py): the package's own register like anyone's.
        "fleet_idempotency.robot_backends": [
            "simulated = fleet_idempotency.robots.world_backends:SimulatedBackend",
            "gazebo = fleet_idempotency.robots.world_backends:GazeboBackend",
            "vda5050 = fleet_idempotency.robots.vda5050.backend:Vda5050Backend",
            "ros_action = fleet_idempotency.robots.ros_action.backend:RosActionBackend",
            "nav2 = fleet_idempotency.robots.ros_action.nav2:Nav2Backend",
        ],
    },
)
