#!/usr/bin/env python3
"""check_deploy_files: the systemd unit, sysusers, sysctl and limits files in deploy/.

  1. `systemd-analyze verify` accepts deploy/herald.service and prints nothing (it exits 0 on
     unknown keys and bad values, so any output fails). The unit names /usr/local/bin/herald,
     which verify wants to exist: a copy pointing at the built herald is verified instead.
  2. `systemd-analyze security --offline=yes` rates its exposure 2.0 or lower ("OK").
  3. The unit's settings agree with herald and the other files: TimeoutStopSec = [server]
     drain (herald's default) + 30 s; SIGHUP on reload; User= is the user sysusers creates;
     LimitNOFILE above max_connections and within fs.nr_open; the hardening the issue asks for.
  4. deploy/sysusers-herald.conf passes `systemd-sysusers --dry-run` in an empty root.
  5. deploy/sysctl-herald.conf: each setting has a comment right above it, names a key this
     kernel has (unless marked optional with "-"), and the topics a 100k+ connection node
     needs are all there.
  6. deploy/limits-herald.conf: well-formed nofile lines within fs.nr_open.

Usage: check_deploy_files.py HERALD SOURCE_DIR
"""
import os
import re
import subprocess
import sys
import tempfile

problems = []


def fail(msg):
    problems.append(msg)


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=60, **kw)


def seconds(text):
    """systemd / herald durations: 40s, 1min 30s, 10s, 2m, 500ms, 1h."""
    units = {"ms": 0.001, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "": 1}
    total = 0.0
    for num, unit in re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", text.strip()):
        if unit not in units:
            raise ValueError(f"unit {unit!r} in {text!r}")
        total += float(num) * units[unit]
    return total


def unit_settings(path):
    """{key: [values]} of the unit's [Service]/[Unit]/[Install] lines."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith(("#", ";", "[")):
                key, _, value = line.partition("=")
                out.setdefault(key, []).append(value)
    return out


def check_unit(herald, src, sysctl):
    unit = os.path.join(src, "deploy/herald.service")
    with tempfile.TemporaryDirectory() as tmp:
        with open(unit, encoding="utf-8") as f:
            text = f.read().replace("/usr/local/bin/herald", os.path.abspath(herald))
        copy = os.path.join(tmp, "herald.service")
        with open(copy, "w", encoding="utf-8") as f:
            f.write(text)
        r = run(["systemd-analyze", "verify", copy])
        out = (r.stdout + r.stderr).strip()
        if r.returncode != 0 or out:
            fail(f"systemd-analyze verify: exit {r.returncode}: {out}")
        else:
            print("ok systemd-analyze verify: no complaint")
        r = run(["systemd-analyze", "security", "--offline=yes", "--no-pager", copy])
        m = re.search(r"Overall exposure level for herald.service: ([0-9.]+)", r.stdout + r.stderr)
        if not m:
            fail(f"systemd-analyze security gave no exposure level: {r.stdout}{r.stderr}")
        elif float(m.group(1)) > 2.0:
            fail(f"systemd-analyze security: exposure {m.group(1)} > 2.0")
        else:
            print(f"ok systemd-analyze security: exposure {m.group(1)}")

    s = unit_settings(unit)
    one = lambda k: (s.get(k) or [""])[-1]
    effective = run([herald, "--print-config"]).stdout
    drain = re.search(r"^drain = (\S+)", effective, re.M).group(1)
    max_conns = int(re.search(r"^max_connections = (\d+)", effective, re.M).group(1))
    if seconds(one("TimeoutStopSec")) != seconds(drain) + 30:
        fail(f"TimeoutStopSec={one('TimeoutStopSec')}, want [server] drain ({drain}) + 30 s")
    if not any("-HUP $MAINPID" in v for v in s.get("ExecReload", [])):
        fail("ExecReload does not send SIGHUP to $MAINPID")
    if one("KillSignal") not in ("", "SIGTERM"):
        fail(f"KillSignal={one('KillSignal')}: herald drains on SIGTERM")
    nofile = int(one("LimitNOFILE") or 0)
    nr_open = int(sysctl.get("fs.nr_open", "1048576"))
    if not max_conns < nofile <= nr_open:
        fail(f"want max_connections ({max_conns}) < LimitNOFILE ({nofile}) <= fs.nr_open "
             f"({nr_open})")
    for key, want in (("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"),
                      ("ProtectHome", "yes"), ("PrivateTmp", "yes"), ("PrivateDevices", "yes"),
                      ("RestrictSUIDSGID", "yes"), ("CapabilityBoundingSet", ""),
                      ("SystemCallArchitectures", "native")):
        if key not in s or one(key) != want:
            fail(f"{key}={one(key)!r}, want {want!r}")
    users = re.findall(r"^u\s+(\S+)", open(os.path.join(src, "deploy/sysusers-herald.conf"),
                                             encoding="utf-8").read(), re.M)
    if one("DynamicUser") != "yes" and (one("User") not in users or one("Group") not in users):
        fail(f"User={one('User')} Group={one('Group')}: not the user sysusers creates ({users})")
    if not problems:
        print(f"ok unit settings: TimeoutStopSec = drain {drain} + 30 s, LimitNOFILE {nofile}, "
              f"User {one('User')}")


def check_sysusers(src):
    with tempfile.TemporaryDirectory() as root, \
            open(os.path.join(src, "deploy/sysusers-herald.conf"), encoding="utf-8") as f:
        r = run(["systemd-sysusers", "--dry-run", f"--root={root}", "-"], stdin=f)
        if r.returncode != 0 or "Creating user 'herald'" not in r.stdout + r.stderr:
            fail(f"systemd-sysusers --dry-run: exit {r.returncode}: {r.stdout}{r.stderr}")
        else:
            print("ok systemd-sysusers --dry-run creates user herald")


def check_sysctl(src):
    path = os.path.join(src, "deploy/sysctl-herald.conf")
    settings, last_comment = {}, None
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.strip()
            if line.startswith(("#", ";")):
                last_comment = line.lstrip("#;").strip() or None
                continue
            if not line:
                last_comment = None
                continue
            key, sep, value = line.partition("=")
            key, value = key.strip(), value.strip()
            if not sep or not value:
                fail(f"{path}:{n}: not key = value: {line!r}")
                continue
            is_optional = key.startswith("-")
            key = key.lstrip("-")
            if last_comment is None:
                fail(f"{path}:{n}: {key} has no comment right above it saying why")
            if not all(re.fullmatch(r"\d+", v) for v in value.split()):
                fail(f"{path}:{n}: {key} = {value!r} is not numbers")
            if not is_optional and not os.path.exists("/proc/sys/" + key.replace(".", "/")):
                fail(f"{path}:{n}: {key} does not exist in this kernel (mark it optional: -{key})")
            settings[key] = value
            last_comment = None
    # What issue 19 names: backlog, descriptors, ports, TCP memory, TIME_WAIT handling.
    for key in ("net.core.somaxconn", "net.ipv4.tcp_max_syn_backlog", "fs.file-max",
                "fs.nr_open", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_mem",
                "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.ipv4.tcp_tw_reuse",
                "net.ipv4.tcp_max_tw_buckets", "net.ipv4.tcp_fin_timeout"):
        if key not in settings:
            fail(f"{path}: {key} is missing")
    if int(settings.get("fs.file-max", 0)) < 200000 or int(settings.get("net.core.somaxconn", 0)) < 4096:
        fail(f"{path}: fs.file-max or somaxconn too low for 100k+ connections")
    print(f"ok {path}: {len(settings)} settings, each commented")
    return settings


def check_limits(src, sysctl):
    path = os.path.join(src, "deploy/limits-herald.conf")
    nr_open = int(sysctl.get("fs.nr_open", "1048576"))
    seen = set()
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            fields = line.split()
            if len(fields) != 4 or fields[1] not in ("soft", "hard", "-") or fields[2] != "nofile":
                fail(f"{path}:{n}: want '<domain> soft|hard nofile <n>': {raw.strip()!r}")
                continue
            if not fields[3].isdigit() or not 100000 <= int(fields[3]) <= nr_open:
                fail(f"{path}:{n}: nofile {fields[3]} not within 100000..fs.nr_open ({nr_open})")
            seen.add((fields[0], fields[1]))
    if not {("herald", "soft"), ("herald", "hard")} <= seen:
        fail(f"{path}: want soft and hard nofile lines for herald")
    print(f"ok {path}")


def main():
    herald, src = sys.argv[1], sys.argv[2]
    sysctl = check_sysctl(src)
    check_limits(src, sysctl)
    check_sysusers(src)
    check_unit(herald, src, sysctl)
    for p in problems:
        print(f"FAIL: {p}", file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
