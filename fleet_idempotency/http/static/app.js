// The fleet page: polls the same HTTP API any client uses (no build step, no library).
// An API key, when the server wants one, comes from the page's address: /#token=<key>.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const FEED_LIMIT = 200;
const token = new URLSearchParams(location.hash.slice(1)).get("token");
const headers = token ? { Authorization: `Bearer ${token}` } : {};
const state = { after: 0, geometry: null, bounds: null, carried: {}, tallies: {} };

async function getJson(path) {
  const answer = await fetch(path, { headers });
  if (!answer.ok) throw new Error(`${path}: ${answer.status}`);
  return answer.json();
}

function el(name, attributes = {}, parent = null) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
  if (parent) parent.appendChild(node);
  return node;
}

function setConnection(ok, text) {
  const pill = document.getElementById("connection");
  pill.textContent = text;
  pill.className = `pill ${ok ? "live" : "down"}`;
}

// --- map ----------------------------------------------------------------------------------
// World frame: metres, y up. The SVG's y goes down, so y is mirrored inside the bounds.
function mapY(y) { return state.bounds.maxY - y + state.bounds.minY; }

function drawGeometry(geometry) {
  const points = [
    ...Object.values(geometry.waypoints), ...Object.values(geometry.docks),
    ...Object.values(geometry.slots),
  ];
  const xs = points.map((p) => p.x), ys = points.map((p) => p.y);
  const margin = 1.5;
  state.bounds = {
    minX: Math.min(...xs) - margin, maxX: Math.max(...xs) + margin,
    minY: Math.min(...ys) - margin, maxY: Math.max(...ys) + margin,
  };
  const b = state.bounds;
  const map = document.getElementById("map");
  map.setAttribute("viewBox", `${b.minX} ${b.minY} ${b.maxX - b.minX} ${b.maxY - b.minY}`);
  map.replaceChildren();
  el("rect", { x: b.minX, y: b.minY, width: b.maxX - b.minX, height: b.maxY - b.minY,
               fill: "#121920" }, map);
  const fixed = el("g", { id: "fixed" }, map);
  for (const [name, dock] of Object.entries(geometry.docks)) {
    el("rect", { class: "dock", x: dock.x - 0.5, y: mapY(dock.y) - 0.5, width: 1, height: 1 },
       fixed);
    label(fixed, name, dock.x + 0.6, mapY(dock.y) + 0.15);
  }
  for (const [name, point] of Object.entries(geometry.waypoints)) {
    el("circle", { class: "waypoint", cx: point.x, cy: mapY(point.y), r: 0.15 }, fixed);
    label(fixed, name, point.x + 0.25, mapY(point.y) - 0.25);
  }
  const items = el("g", { id: "items" }, map);
  for (const [name, slot] of Object.entries(geometry.slots)) {
    el("rect", { class: `slot ${slot.kind}`, x: slot.x - 0.6, y: mapY(slot.y) - 0.6,
                 width: 1.2, height: 1.2, "data-slot": name }, fixed);
    label(fixed, name, slot.x - 0.5, mapY(slot.y) + 1.1);
  }
  el("g", { id: "robots-layer" }, map);
  drawItems(items, Object.fromEntries(
    Object.entries(geometry.slots).map(([name, slot]) => [name, slot.item ?? null])));
}

function label(parent, text, x, y) {
  el("text", { class: "label", x, y }, parent).textContent = text;
}

function drawItems(layer, slots) {
  layer = layer || document.getElementById("items");
  layer.replaceChildren();
  for (const [name, item] of Object.entries(slots || {})) {
    const slot = state.geometry.slots[name];
    if (!item || !slot) continue;
    el("rect", { class: `item ${slot.kind}`, x: slot.x - 0.4, y: mapY(slot.y) - 0.4,
                 width: 0.8, height: 0.8, "data-item": item }, layer);
  }
}

function drawRobot(robot) {
  const layer = document.getElementById("robots-layer");
  let group = layer.querySelector(`[data-robot="${robot.robot_id}"]`);
  if (!group) {
    group = el("g", { "data-robot": robot.robot_id }, layer);
    el("circle", { class: "busy-ring", r: 0.75 }, group);
    const body = el("g", { class: "heading" }, group);
    if (robot.robot_type === "forklift") {
      el("rect", { class: "body", x: -0.5, y: -0.35, width: 1.0, height: 0.7, rx: 0.1 }, body);
      el("rect", { class: "body", x: 0.5, y: -0.3, width: 0.45, height: 0.12 }, body);
      el("rect", { class: "body", x: 0.5, y: 0.18, width: 0.45, height: 0.12 }, body);
    } else if (robot.robot_type === "arm") {
      el("circle", { class: "body", r: 0.45 }, body);
      el("rect", { class: "body", x: 0, y: -0.1, width: 0.9, height: 0.2 }, body);
    } else {
      el("circle", { class: "body", r: 0.45 }, body);
      el("path", { d: "M0.45 0 L0.1 -0.2 L0.1 0.2 Z", fill: "#0009" }, body);
    }
    el("text", { x: -0.9, y: -0.85 }, group).textContent = robot.robot_id;
    drawCargo(group);
  }
  const online = robot.online ? "" : " offline";
  group.setAttribute("class", `robot ${robot.robot_type}${robot.busy ? " busy" : ""}${online}`);
  group.style.transform = `translate(${robot.pose.x}px, ${mapY(robot.pose.y)}px)`;
  const degrees = (-robot.pose.theta * 180) / Math.PI;  // mirrored y: angles flip
  group.querySelector(".heading").setAttribute("transform", `rotate(${degrees})`);
}

// A pallet on a forklift's forks, an item in an arm's gripper: drawn on the robot.
function drawCargo(group) {
  const item = (state.carried || {})[group.dataset.robot];
  let cargo = group.querySelector(".cargo");
  if (!item) { if (cargo) cargo.remove(); return; }
  if (!cargo) cargo = el("rect", { class: "item cargo", x: -0.3, y: -0.3, width: 0.6,
                                   height: 0.6 }, group);
  cargo.setAttribute("data-item", item);
}

// --- panels ----------------------------------------------------------------------------------
function drawRobotTable(robots) {
  const rows = robots.map((r) => {
    const share = r.capacity ? Math.min(1, r.queue_depth / r.capacity) : 0;
    const full = r.capacity && r.queue_depth >= r.capacity ? " full" : "";
    return `<tr data-robot-row="${r.robot_id}">
      <td><span class="dot${r.online ? "" : " off"}"></span>${r.robot_id}</td>
      <td>${r.robot_type}</td>
      <td><span class="bar${full}"><i style="width:${share * 100}%"></i></span>` +
      `${r.queue_depth}/${r.capacity}</td>
      <td class="key" title="${escapeHtml(r.current_key)}">${escapeHtml(r.current_key) || "—"}</td>
    </tr>`;
  });
  document.querySelector("#robots tbody").innerHTML = rows.join("");
}

function escapeHtml(text) {
  return String(text ?? "").replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function describe(event) {
  const d = event.detail || {};
  const who = [event.client_id, event.idempotency_key].filter(Boolean).join("/");
  const where = event.robot_id ? ` → ${event.robot_id}` : "";
  const extra = d.status_code ? ` [${d.status_code}]` : d.attempt ? ` #${d.attempt}` :
    d.why ? ` (${d.why})` : "";
  return `${who}${where}${extra}`;
}

function addEvents(events) {
  const feed = document.getElementById("feed");
  for (const event of events) {
    state.tallies[event.event_type] = (state.tallies[event.event_type] || 0) + 1;
    const item = document.createElement("li");
    item.className = `ev-${event.event_type}`;
    item.dataset.sequence = event.sequence;
    item.innerHTML = `<span class="seq">${event.sequence}</span>` +
      `<span class="type">${event.event_type.replaceAll("_", " ")}</span>` +
      `<span class="what">${escapeHtml(describe(event))}</span>`;
    feed.prepend(item);
  }
  while (feed.children.length > FEED_LIMIT) feed.lastElementChild.remove();
  for (const node of document.querySelectorAll("[data-tally]")) {
    node.textContent = state.tallies[node.dataset.tally] || 0;
  }
}

// --- polling ---------------------------------------------------------------------------------
async function pollRobots() {
  try {
    const { robots } = await getJson("/v1/robots");
    robots.forEach(drawRobot);
    drawRobotTable(robots);
    document.body.dataset.robotsDrawn = robots.filter((r) => r.online).length;
    setConnection(true, "live");
  } catch (error) {
    setConnection(false, `offline: ${error.message}`);
  }
}

async function pollEvents() {
  try {
    for (let page = 0; page < 10; page++) {
      const answer = await getJson(`/v1/events?after=${state.after}&limit=500`);
      if (!answer.events.length) break;
      addEvents(answer.events);
      state.after = answer.next_after;
    }
    document.body.dataset.events = document.getElementById("feed").children.length;
  } catch (error) {
    setConnection(false, `offline: ${error.message}`);
  }
}

async function pollWorld() {
  try {
    const world = await getJson("/v1/world");
    if (!state.geometry) {
      state.geometry = world.geometry;
      drawGeometry(world.geometry);
    }
    if (world.state) {
      drawItems(null, world.state.slots);
      state.carried = world.state.carried || {};
      for (const group of document.querySelectorAll("[data-robot]")) drawCargo(group);
    }
  } catch (error) {
    setConnection(false, `offline: ${error.message}`);
  }
}

function every(ms, task) {
  const run = async () => { await task(); setTimeout(run, ms); };
  run();
}

(async () => {
  while (!state.geometry) {
    await pollWorld();
    if (!state.geometry) await new Promise((done) => setTimeout(done, 1000));
  }
  every(250, pollRobots);
  every(500, pollEvents);
  every(1000, pollWorld);
})();
