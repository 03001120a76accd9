#!/usr/bin/env python3
"""check_metrics: a running herald exports every metric the dashboard and the alerts use.

Starts redis-server on a free loopback port and herald on the Redis engine against it (so the
Redis engine's families are there too; every other family is the same on either engine), on
free loopback ports (port 0; its ev=listening line names them), waits until /readyz says the
engine is ready, publishes one message through the admin API so the publish counters move,
then scrapes /metrics twice, once with `X-Api-Key` and once with `Authorization: Bearer`
(what the scrape config sends), and stops herald and Redis by PID (SIGTERM; herald must exit
0).

  1. `promtool check metrics` accepts the scrape and prints no lint problem.
  2. Every metric name in the dashboard's exprs and in every rules file's exprs is a family
     herald exports (a histogram's _bucket, _sum and _count count as the histogram), or `up`
     (Prometheus's own).
  3. Every equality label matcher on a herald metric (reason="slow_consumer", ...) matches
     some exported series, so a renamed label value cannot blank a panel either.

Usage: check_metrics.py HERALD PROMTOOL DASHBOARD_JSON RULES_FILE...
"""
import os
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request

import promql

# The only metrics allowed to be missing from a running herald, in one place: the Redis
# engine's (issue 19's Redis parts; dashboards/herald-alerts-redis.yml and the dashboard's
# Redis row). Remove each once herald exports it.
PROMETHEUS_OWN = {"up"}
API_KEY = "check-metrics-key-0123456789"
START_TIMEOUT_S = 20
problems = []


def fail(msg):
    problems.append(msg)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis():
    """Starts redis-server on a free loopback port; returns (process, port) once it is ready."""
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_TIMEOUT_S
    buf = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], deadline - time.monotonic())
        if not ready:
            break
        chunk = os.read(proc.stdout.fileno(), 4096)
        if not chunk:
            break
        buf += chunk
        if b"Ready to accept connections" in buf:
            return proc, port
    proc.kill()
    proc.wait()
    raise SystemExit("FAIL: redis-server did not start:\n" + buf.decode(errors="replace"))


def await_ready(admin_port):
    """Waits until /readyz answers 200 (the Redis engine connected and loaded its functions)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/readyz", timeout=5):
                return
        except urllib.error.HTTPError:
            select.select([], [], [], 0.05)  # a 503: the engine is still connecting
    fail("herald's /readyz never answered 200")


def start_herald(herald, redis_port):
    """Starts herald; returns (process, client port, admin port) once it logged ev=listening."""
    proc = subprocess.Popen(
        [herald, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--io-threads", "2",
         "--api-key", API_KEY, "--insecure", "--log-level", "info", "--engine", "redis",
         "--redis", f"127.0.0.1:{redis_port}"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + START_TIMEOUT_S
    buf = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], deadline - time.monotonic())
        if not ready:
            break
        chunk = os.read(proc.stderr.fileno(), 4096)
        if not chunk:
            break
        buf += chunk
        m = re.search(rb"ev=listening.*\sport=(\d+)\sadmin_port=(\d+)", buf)
        if m:
            return proc, int(m.group(1)), int(m.group(2))
    proc.kill()
    proc.wait()
    raise SystemExit(f"FAIL: herald did not log ev=listening within {START_TIMEOUT_S}s:\n"
                     + buf.decode(errors="replace"))


def stop_herald(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        # Drains nothing (the client has gone); the default window is an upper bound.
        rc = proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        fail("herald did not exit within 20 s of SIGTERM")
        return
    rest = proc.stderr.read().decode(errors="replace")
    if rc != 0:
        fail(f"herald exited {rc} after SIGTERM:\n{rest[-2000:]}")


def scrape(port, headers):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.read().decode()


def publish(admin_port):
    """One publish through the admin API, so the publish counters and histograms move."""
    req = urllib.request.Request(f"http://127.0.0.1:{admin_port}/api/publish?channel=news",
                                 data=b"hello", method="POST",
                                 headers={"X-Api-Key": API_KEY, "Content-Type": "text/plain"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        resp.read()


def exported(text):
    """({family: type}, [(series name, {label: value})]) of a Prometheus text exposition."""
    types, series = {}, []
    for line in text.splitlines():
        m = re.match(r"# TYPE (\S+) (\S+)", line)
        if m:
            types[m.group(1)] = m.group(2)
            continue
        if not line or line.startswith("#"):
            continue
        m = re.match(r"(" + promql.IDENT + r")(?:\{(.*)\})?\s", line)
        if m:
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            series.append((m.group(1), labels))
    return types, series


def main():
    herald, promtool, dashboard, rules = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    redis, redis_port = start_redis()
    try:
        proc, _, admin_port = start_herald(herald, redis_port)
        try:
            await_ready(admin_port)
            try:
                publish(admin_port)
            except OSError as e:
                fail(f"POST /api/publish: {e}")
            text = scrape(admin_port, {"X-Api-Key": API_KEY})
            bearer = scrape(admin_port, {"Authorization": f"Bearer {API_KEY}"})
        finally:
            stop_herald(proc)
    finally:
        redis.terminate()
        redis.wait()

    types, series = exported(text)
    if set(exported(bearer)[0]) != set(types):
        fail("the scrape with Authorization: Bearer has other families than with X-Api-Key")
    lint = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=30)
    if lint.returncode != 0 or (lint.stdout + lint.stderr).strip():
        fail(f"promtool check metrics: exit {lint.returncode}: {lint.stdout}{lint.stderr}")
    else:
        print(f"ok promtool check metrics: {len(types)} families, {len(series)} series, clean")

    histograms = {n for n, t in types.items() if t == "histogram"}
    sources = [(f"dashboard panel {t!r}", e) for t, e in promql.dashboard_exprs(dashboard)]
    for path in rules:
        sources += [(f"{os.path.basename(path)} {n}", e) for n, e in promql.rule_exprs(path)]
    used = {}
    for where, expr in sources:
        for name in promql.metric_names(expr):
            used.setdefault(promql.family(name, histograms), set()).add(where)
        for name, eq in promql.selectors(expr):
            fam = promql.family(name, histograms)
            if fam not in types or not eq:
                continue
            match = [s for s in series if promql.family(s[0], histograms) == fam and
                     all(s[1].get(k) == v for k, v in eq.items() if k != "job")]
            if not match:
                fail(f"{where}: {name}{eq} matches no exported series")
    for fam, wheres in sorted(used.items()):
        if fam in types or fam in PROMETHEUS_OWN:
            continue
        fail(f"{fam} is not exported by herald; used by: {', '.join(sorted(wheres))}")
    print(f"ok {len(used)} metric families used by the dashboard and {len(rules)} rules "
          f"file(s), every one exported")
    for p in problems:
        print(f"FAIL: {p}", file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
