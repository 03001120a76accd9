#!/usr/bin/env python3
"""check_dashboard: dashboards/herald-grafana.json has what Grafana needs and what issue 19
asks for.

Grafana: a title, a uid Grafana accepts, a schemaVersion, time range, a datasource variable
of type prometheus that every panel and target uses, every other $variable defined, unique
panel ids, gridPos inside the 24-column grid with no two visible panels overlapping (nor two
panels of one collapsed row), every data panel with a known type and targets that each have
an expr and a refId unique within the panel.

Issue 19: the rows come in order (health, queues, history, drain, Redis), and each uses the
metrics the issue names for it; the Redis row is collapsed (only nodes with engine = redis
export its metrics) and uses herald_redis_* only, and no other row does, so a memory-engine
deployment sees no empty panels outside that row.

Usage: check_dashboard.py DASHBOARD_JSON
"""
import json
import re
import sys

import promql

PANEL_TYPES = {"row", "stat", "timeseries", "gauge", "bargauge", "table", "text", "heatmap"}
BUILTIN_VARS = {"__rate_interval", "__interval", "__interval_ms", "__range", "__range_s",
                "__range_ms", "__dashboard", "__from", "__to"}

# Issue 19's rows, in order: (title must match, metrics its panels must use between them).
ROWS = [
    (r"(?i)health", {"herald_connections", "herald_accepted_total", "herald_closed_total",
                     "herald_publishes_total", "herald_deliveries_total",
                     "herald_slow_consumer_drops_total"}),
    (r"(?i)queue", {"herald_pool_queue_depth", "herald_pool_queue_capacity",
                    "herald_pool_queue_high_water", "herald_pool_rejected_total",
                    "herald_pool_wait_seconds_bucket", "herald_loop_queue_depth",
                    "herald_loop_lag_seconds_bucket", "herald_publish_to_flush_seconds_bucket"}),
    (r"(?i)history", {"herald_history_channels", "herald_history_messages",
                      "herald_history_bytes", "herald_history_max_bytes",
                      "herald_history_evicted_total", "herald_recoveries_total"}),
    (r"(?i)drain", {"herald_draining", "herald_drained_total"}),
    (r"(?i)redis", {"herald_redis_up", "herald_redis_pending_commands",
                    "herald_redis_reconnects_total", "herald_redis_lost_messages_total"}),
]

problems = []


def fail(msg):
    problems.append(msg)


def overlaps(a, b):
    return (a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"]
            and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"])


def check_grid(panels, where):
    for p in panels:
        g = p.get("gridPos", {})
        if not all(isinstance(g.get(k), int) for k in ("x", "y", "w", "h")):
            fail(f"{where}: panel {p.get('title')!r}: gridPos needs integer x, y, w, h")
            return
        if g["w"] < 1 or g["h"] < 1 or g["x"] < 0 or g["y"] < 0 or g["x"] + g["w"] > 24:
            fail(f"{where}: panel {p.get('title')!r}: gridPos {g} outside the 24-column grid")
    for i, a in enumerate(panels):
        for b in panels[i + 1:]:
            if overlaps(a["gridPos"], b["gridPos"]):
                fail(f"{where}: panels {a.get('title')!r} and {b.get('title')!r} overlap")


def check_structure(dash):
    for key in ("title", "uid", "schemaVersion", "panels", "templating", "time"):
        if key not in dash:
            fail(f"top level: no {key!r}")
    if not re.fullmatch(r"[a-zA-Z0-9_-]{1,40}", str(dash.get("uid", ""))):
        fail(f"uid {dash.get('uid')!r}: Grafana wants 1-40 of [a-zA-Z0-9_-]")
    if not isinstance(dash.get("schemaVersion"), int) or dash["schemaVersion"] < 30:
        fail(f"schemaVersion {dash.get('schemaVersion')!r}: want an integer >= 30")
    if not {"from", "to"} <= set(dash.get("time", {})):
        fail("time needs from and to")
    variables = {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}
    ds = variables.get("datasource")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        fail("no variable 'datasource' of type datasource, query prometheus")

    panels = promql.dashboard_panels(dash)
    ids = [p.get("id") for p in panels]
    if any(not isinstance(i, int) for i in ids) or len(set(ids)) != len(ids):
        fail("panel ids must be unique integers")
    for p in panels:
        where = f"panel {p.get('id')} {p.get('title')!r}"
        if p.get("type") not in PANEL_TYPES:
            fail(f"{where}: unknown type {p.get('type')!r}")
        if not p.get("title"):
            fail(f"{where}: no title")
        if p.get("type") == "row":
            if p.get("panels") and not p.get("collapsed"):
                fail(f"{where}: an open row keeps its panels at the top level, not inside it")
            continue
        if p.get("datasource", {}).get("uid") != "${datasource}":
            fail(f"{where}: datasource is not the ${{datasource}} variable")
        targets = p.get("targets") or []
        if not targets:
            fail(f"{where}: no targets")
        refs = [t.get("refId") for t in targets]
        if None in refs or len(set(refs)) != len(refs):
            fail(f"{where}: every target needs a refId unique within the panel")
        for t in targets:
            if not t.get("expr"):
                fail(f"{where}: target {t.get('refId')} has no expr")
            if t.get("datasource", {}).get("uid", "${datasource}") != "${datasource}":
                fail(f"{where}: target {t.get('refId')} names another datasource")
            for var in re.findall(r"\$\{?(\w+)", t.get("expr", "")):
                if var not in variables and var not in BUILTIN_VARS:
                    fail(f"{where}: ${var} is not a dashboard variable")
    top = dash.get("panels", [])
    check_grid(top, "top level")
    for row in top:
        if row.get("type") == "row" and row.get("collapsed"):
            check_grid(row.get("panels", []), f"row {row.get('title')!r}")
    return top


def row_metrics(row, top):
    """The metric names the panels of one row use (nested if collapsed, else those below it)."""
    if row.get("collapsed"):
        members = row.get("panels", [])
    else:
        i = top.index(row)
        members = []
        for p in top[i + 1:]:
            if p.get("type") == "row":
                break
            members.append(p)
    return {n for p in members for t in p.get("targets", []) for n in
            promql.metric_names(t.get("expr", ""))}, len(members)


def check_rows(top):
    rows = [p for p in top if p.get("type") == "row"]
    at = 0
    for pattern, wanted in ROWS:
        while at < len(rows) and not re.search(pattern, rows[at]["title"]):
            at += 1
        if at == len(rows):
            fail(f"no row matching {pattern} after the previous one (order: health, queues, "
                 f"history, drain, Redis)")
            return
        used, count = row_metrics(rows[at], top)
        if count == 0:
            fail(f"row {rows[at]['title']!r} has no panels")
        missing = wanted - used
        if missing:
            fail(f"row {rows[at]['title']!r} does not use {sorted(missing)}")
        print(f"ok row {rows[at]['title']!r}: {count} panels")
        if pattern == ROWS[-1][0]:
            redis_row = rows[at]
            if not redis_row.get("collapsed"):
                fail("the Redis row should be collapsed: memory-engine nodes export none of it")
            if {n for n in used if not n.startswith("herald_redis_")}:
                fail(f"the Redis row uses more than herald_redis_*: {sorted(used)}")
        at += 1
    if rows and re.search(ROWS[0][0], rows[0]["title"]) is None:
        fail(f"the first row is {rows[0]['title']!r}, not the health row")
    for row in rows:
        if re.search(ROWS[-1][0], row["title"]):
            continue
        used, _ = row_metrics(row, top)
        stray = sorted(n for n in used if n.startswith("herald_redis_"))
        if stray:
            fail(f"row {row['title']!r} uses Redis engine metrics {stray}: keep them in the "
                 f"Redis row")


def main():
    path = sys.argv[1]
    with open(path, encoding="utf-8") as f:
        dash = json.load(f)
    top = check_structure(dash)
    if not problems:
        check_rows(top)
    for p in problems:
        print(f"FAIL: {path}: {p}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"ok {path}: {len(promql.dashboard_panels(dash))} panels, fields Grafana needs")


if __name__ == "__main__":
    main()
