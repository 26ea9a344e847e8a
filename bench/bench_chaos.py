"""The large chaos run: >= 10,000 commands, >= 20 % of results dropped, with restarts.

The same Demo as `fleet-idem demo` (real processes, real DDS, real kill -9s), scaled up,
on its mixed fleet (config/fleet_mixed.yaml: forklift_2 and amr_3 are VDA 5050 vehicles
behind a throwaway password-protected Mosquitto), so the run also kill -9s simulated
vehicles (they forget their order), restarts the broker and loses order publishes;
``--fleet config/fleet.yaml`` runs the all-DDS fleet. Prints its report and the run's
figures as name=value lines. Takes several minutes.

    .venv/bin/python bench/bench_chaos.py [--commands 10000] [--drop-results 0.25]
        [--time-scale 0.002] [--robot-crashes 6] [--orchestrator-crashes 3]
        [--vehicle-crashes 3] [--broker-restarts 2] [--drop-orders 0.2] [--host-agents]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fleet_idempotency.bringup.demo import Demo, DemoOptions
from fleet_idempotency.bringup.report import percentile

FLEET_FILE = Path(__file__).resolve().parents[1] / "config" / "fleet_mixed.yaml"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, default=10_000)
    parser.add_argument("--drop-results", type=float, default=0.25)
    parser.add_argument("--duplicate-deliveries", type=float, default=0.1)
    parser.add_argument("--reordered-deliveries", type=float, default=0.1)
    parser.add_argument("--time-scale", type=float, default=0.002)
    parser.add_argument("--robot-crashes", type=int, default=6)
    parser.add_argument("--orchestrator-crashes", type=int, default=3)
    parser.add_argument("--vehicle-crashes", type=int, default=3)
    parser.add_argument("--broker-restarts", type=int, default=2)
    parser.add_argument("--drop-orders", type=float, default=0.2)
    parser.add_argument("--fleet", type=Path, default=FLEET_FILE)
    parser.add_argument("--host-agents", action="store_true")
    parser.add_argument("--seed", type=int, default=7)
    options = parser.parse_args()
    demo = Demo(
        DemoOptions(
            fleet_file=options.fleet,
            commands=options.commands,
            time_scale=options.time_scale,
            host_agents=options.host_agents,
            drop_results=options.drop_results,
            duplicate_deliveries=options.duplicate_deliveries,
            reordered_deliveries=options.reordered_deliveries,
            robot_crashes=options.robot_crashes,
            orchestrator_crashes=options.orchestrator_crashes,
            vehicle_crashes=options.vehicle_crashes,
            broker_restarts=options.broker_restarts,
            drop_orders=options.drop_orders,
            seed=options.seed,
            progress_period_s=15.0,
        ),
        out=lambda line: print(line, flush=True),
    )
    status = demo.run()
    figures = demo.figures
    print(f"chaos_commands={figures.commands_planned}")
    print(f"chaos_wall_s={figures.wall_s:.1f}")
    print(f"chaos_commands_per_s={figures.commands_planned / max(figures.wall_s, 1e-9):.1f}")
    print(f"chaos_drop_probability={options.drop_results}")
    print(f"chaos_orchestrator_retries={figures.events_seen['retried']}")
    print(f"chaos_robot_crashes={figures.robot_crashes}")
    print(f"chaos_orchestrator_crashes={figures.orchestrator_crashes}")
    print(f"chaos_vehicle_crashes={figures.vehicle_crashes}")
    print(f"chaos_broker_restarts={figures.broker_restarts}")
    print(f"chaos_order_publishes_lost={figures.orders_dropped}")
    print(f"chaos_latency_p50_ms={percentile(figures.latencies_s, 0.5) * 1e3:.1f}")
    print(f"chaos_latency_p99_ms={percentile(figures.latencies_s, 0.99) * 1e3:.1f}")
    print(f"chaos_result={'PASS' if status == 0 else 'FAIL'}")
    return status


if __name__ == "__main__":
    sys.exit(main())
