"""The fleet page in a real headless Chromium (Debian's), in front of a real fleet.

Set FLEET_IDEM_UPDATE_SCREENSHOT=1 to also write the screenshot the README shows
(docs/fleet_page.png); otherwise it is kept in the test's temporary directory.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from fleet_idempotency.bringup.system_tools import CHROMIUM, MissingSystemTool

from support.fleet_harness import FleetHarness
from support.http_harness import OPS_KEY, WMS_KEY, HttpServer, post_command
from support.paths import REPO

pytestmark = pytest.mark.skipif(not CHROMIUM.available(), reason=str(MissingSystemTool(CHROMIUM)))


def test_page_draws_the_map_robots_and_live_events(
    fleet: FleetHarness, http_server: HttpServer, tmp_path: Path
) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    fleet.start_agent("forklift_1", "forklift", start_x=2.0, start_y=4.0, time_scale=0.05)
    fleet.start_agent("amr_1", "amr", time_scale=0.05)
    fleet.start_agent("amr_2", "amr", start_y=2.5, time_scale=0.05)
    fleet.start_agent("arm_1", "arm", start_x=24.0, start_y=8.0, time_scale=0.05)
    fleet.start_orchestrator()
    http_server.start()
    http_server.wait_for_robots(["forklift_1", "amr_1", "amr_2", "arm_1"])
    with http_server.client(WMS_KEY) as client:
        assert post_command(client, "forklift_1", "pick-A1", "pick", {"slot": "A1"}).is_success
        assert post_command(client, "amr_1", "go-W7", "move_to_waypoint", {"waypoint": "W7"})
        assert post_command(client, "amr_2", "dock-D5", "dock", {"dock": "D5"}).is_success
        assert post_command(client, "arm_1", "item", "pick", {"slot": "S1"}).is_success
        # A retried POST and a key reused for another command: both show in the feed.
        assert post_command(client, "amr_2", "dock-D5", "dock", {"dock": "D5"}).status_code
        assert post_command(client, "amr_2", "dock-D5", "dock", {"dock": "D6"}).status_code == 422

    shot = tmp_path / "fleet_page.png"
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM.find()), headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 820})
            page.goto(f"{http_server.base_url}/#token={OPS_KEY}")
            page.wait_for_function("Number(document.body.dataset.robotsDrawn) >= 4")
            page.wait_for_selector("#feed li.ev-result", timeout=30_000)
            page.wait_for_selector("#feed li.ev-mismatch_rejected")
            page.wait_for_selector("#feed li.ev-duplicate_suppressed")
            assert page.locator("#map [data-robot]").count() == 6, "every fleet robot drawn"
            assert page.locator("#map [data-slot]").count() == 16
            # Pallets and items are conserved: on their slots or carried by a robot.
            page.wait_for_function("document.querySelectorAll('#map [data-item]').length == 8")
            assert page.locator("#robots tbody tr").count() == 6
            assert page.text_content("#connection") == "live"
            page.wait_for_timeout(600)  # let the robots' last moves settle on screen
            page.screenshot(path=str(shot))
        finally:
            browser.close()
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("FLEET_IDEM_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(shot, REPO / "docs" / "fleet_page.png")
