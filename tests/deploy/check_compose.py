#!/usr/bin/env python3
"""check_compose: deploy/Dockerfile, deploy/compose.yaml and the files they use.

What can be checked without a container engine (test_container.sh and
test_compose_stack.sh build and run the image and the stack with podman) is:

  1. compose.yaml parses (YAML, anchors merged) and has the services issue 19 names: redis,
     two herald nodes built from deploy/Dockerfile, haproxy, prometheus and grafana; every
     relative bind-mount source exists (the secret files excepted: they are made by hand,
     deploy/.gitignore keeps them out of git, and compose.yaml says how to make them); every
     published port is bound to 127.0.0.1; each node's stop_grace_period is its drain + 30 s;
     sysctls are in the list form (podman-compose 1.0.3 passes only the key of a mapping).
     compose.debian.yaml overrides only services compose.yaml has, and each image it builds
     comes from a Dockerfile FROM debian:12-slim whose COPY sources exist.
  2. The Dockerfile is multi-stage, every stage FROM debian:12-slim, the last one runs as a
     non-root USER, its COPY sources exist, and its runtime packages include the one owning
     each library the built herald needs (readelf NEEDED, dpkg -S; libc is in the base).
  3. The entrypoint turns HERALD_*_FILE into the variables herald reads: run with the built
     herald, --print-config shows both secrets set and herald warns about no variable.
  4. The files the services mount: `herald --check-config` on herald.conf, `haproxy -c` on
     haproxy.cfg (unresolvable compose host names are its only warnings), promtool (in
     check_prometheus.sh) on prometheus.yml, whose targets are the two nodes' admin port;
     Grafana's provisioning names the prometheus service and the path the dashboard is
     mounted at.

Usage: check_compose.py HERALD SOURCE_DIR
"""
import os
import re
import subprocess
import sys
import tempfile

import yaml

problems = []


def fail(msg):
    problems.append(msg)


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=60, **kw)


def seconds(text):
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "": 1}
    return sum(float(n) * units[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h|)", text))


def check_compose(herald, deploy):
    path = os.path.join(deploy, "compose.yaml")
    with open(path, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    services = doc.get("services", {})
    nodes = sorted(n for n, s in services.items() if "build" in s)
    for name in ("redis", "haproxy", "prometheus", "grafana"):
        if name not in services:
            fail(f"compose.yaml: no {name} service")
    if len(nodes) != 2:
        fail(f"compose.yaml: want two herald nodes built from the Dockerfile, have {nodes}")
    secret_files = {os.path.normpath(os.path.join(deploy, s["file"]))
                    for s in doc.get("secrets", {}).values() if "file" in s}
    for s in secret_files:
        if not s.startswith(os.path.join(deploy, "secrets") + os.sep):
            fail(f"compose.yaml: secret file {s} outside deploy/secrets/ (not ignored by git)")
    with open(os.path.join(deploy, ".gitignore"), encoding="utf-8") as f:
        if "/secrets/" not in f.read().split():
            fail("deploy/.gitignore does not keep deploy/secrets/ out of git")
    conf = {}
    for name, svc in services.items():
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0]
            if src.startswith("."):
                full = os.path.normpath(os.path.join(deploy, src))
                if not os.path.exists(full):
                    fail(f"compose.yaml: {name} mounts {src}, which does not exist")
        for port in svc.get("ports", []):
            if not str(port).startswith("127.0.0.1:"):
                fail(f"compose.yaml: {name} publishes {port} beyond the host's loopback")
        for secret in svc.get("secrets", []):
            if secret not in doc.get("secrets", {}):
                fail(f"compose.yaml: {name} uses undeclared secret {secret}")
    for name in nodes:
        svc = services[name]
        build = svc["build"]
        dockerfile = os.path.normpath(os.path.join(deploy, build["context"], build["dockerfile"]))
        if not os.path.isfile(dockerfile):
            fail(f"compose.yaml: {name} builds from {dockerfile}, which does not exist")
        mounts = dict(v.split(":")[:2][::-1] for v in svc.get("volumes", []))
        conf_src = mounts.get("/etc/herald/herald.conf")
        if not conf_src:
            fail(f"compose.yaml: {name} mounts no /etc/herald/herald.conf")
            continue
        conf[name] = os.path.normpath(os.path.join(deploy, conf_src))
        r = run([herald, "--check-config", conf[name]])
        if r.returncode != 0:
            fail(f"herald --check-config {conf_src}: {r.stdout}{r.stderr}")
        drain = re.search(r"^drain\s*=\s*(\S+)", open(conf[name]).read(), re.M)
        drain_s = seconds(drain.group(1)) if drain else 10
        if seconds(str(svc.get("stop_grace_period", "10s"))) != drain_s + 30:
            fail(f"compose.yaml: {name} stop_grace_period {svc.get('stop_grace_period')}, "
                 f"want drain ({drain_s:g} s) + 30 s")
        if "--node-id" not in svc.get("command", []):
            fail(f"compose.yaml: {name} has no --node-id of its own")
    for name, svc in services.items():
        if "sysctls" in svc and not isinstance(svc["sysctls"], list):
            fail(f"compose.yaml: {name}'s sysctls are a mapping; podman-compose wants KEY=VALUE items")
    print(f"ok compose.yaml: services {sorted(services)}, nodes {nodes}")
    return doc, nodes


def check_debian_override(deploy, doc):
    """compose.debian.yaml: what it overrides exists, and what it builds can be built."""
    with open(os.path.join(deploy, "compose.debian.yaml"), encoding="utf-8") as f:
        over = yaml.safe_load(f)
    for name, svc in over.get("services", {}).items():
        if name not in doc["services"]:
            fail(f"compose.debian.yaml: overrides {name}, which compose.yaml does not have")
            continue
        build = svc.get("build")
        if not build:
            continue
        ctx = os.path.normpath(os.path.join(deploy, build["context"]))
        dockerfile = os.path.join(ctx, build.get("dockerfile", "Dockerfile"))
        if not os.path.isfile(dockerfile):
            fail(f"compose.debian.yaml: {name} builds from {dockerfile}, which does not exist")
            continue
        for s in dockerfile_stages(dockerfile):
            if s["from"] != "debian:12-slim":
                fail(f"{dockerfile}: FROM {s['from']}, want debian:12-slim")
            for word, rest in s["lines"]:
                if word == "COPY" and "--from=" not in rest:
                    for item in rest.split()[:-1]:
                        if not os.path.exists(os.path.join(ctx, item)):
                            fail(f"{dockerfile}: COPY {item}: not in its context {ctx}")
    print(f"ok compose.debian.yaml: overrides {sorted(over.get('services', {}))}")


def dockerfile_stages(path):
    stages, cur = [], None
    with open(path, encoding="utf-8") as f:
        text = f.read().replace("\\\n", " ")
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word == "FROM":
            cur = {"from": rest.split()[0], "lines": []}
            stages.append(cur)
        elif cur is not None:
            cur["lines"].append((word, rest.strip()))
    return stages


def needed_packages(herald):
    """Debian packages owning the libraries herald names as NEEDED, libc6 aside."""
    out = run(["readelf", "-d", herald]).stdout
    packages = set()
    for lib in re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out):
        owner = run(["dpkg", "-S", f"*/{lib}"])
        if owner.returncode != 0:
            fail(f"dpkg -S: no package owns {lib}")
            continue
        packages.add(owner.stdout.split(":")[0].strip())
    return packages - {"libc6"}


def check_dockerfile(herald, src):
    path = os.path.join(src, "deploy/Dockerfile")
    stages = dockerfile_stages(path)
    if len(stages) < 2:
        fail("Dockerfile: not multi-stage")
    for s in stages:
        if s["from"] != "debian:12-slim":
            fail(f"Dockerfile: stage FROM {s['from']}, want debian:12-slim")
    final = stages[-1]
    users = [rest for word, rest in final["lines"] if word == "USER"]
    if not users or users[-1].split(":")[0] in ("root", "0"):
        fail(f"Dockerfile: the final stage runs as {users[-1] if users else 'root'}")
    for s in stages:
        for word, rest in s["lines"]:
            if word == "COPY" and "--from=" not in rest:
                for item in rest.split()[:-1]:
                    if not os.path.exists(os.path.join(src, item)):
                        fail(f"Dockerfile: COPY {item}: no such file in the repository")
    runtime = " ".join(rest for word, rest in final["lines"] if word == "RUN")
    for pkg in sorted(needed_packages(herald)):
        if not re.search(r"(^|\s)" + re.escape(pkg) + r"(\s|$)", runtime):
            fail(f"Dockerfile: the runtime stage does not install {pkg} (herald needs it)")
    entry = [rest for word, rest in final["lines"] if word == "ENTRYPOINT"]
    if not entry or "docker-entrypoint.sh" not in entry[-1]:
        fail("Dockerfile: ENTRYPOINT is not docker-entrypoint.sh")
    print(f"ok Dockerfile: {len(stages)} stages FROM debian:12-slim, runs as USER {users[-1]}")


def check_entrypoint(herald, src):
    script = os.path.join(src, "deploy/docker-entrypoint.sh")
    if not os.access(script, os.X_OK):
        fail("deploy/docker-entrypoint.sh is not executable")
    with tempfile.TemporaryDirectory() as tmp:
        os.symlink(os.path.abspath(herald), os.path.join(tmp, "herald"))
        for name, value in (("token", "entrypoint-token-secret-0123456789\n"),
                            ("key", "entrypoint-admin-key\n")):
            with open(os.path.join(tmp, name), "w") as f:
                f.write(value)
        env = {"PATH": tmp + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
               "HERALD_TOKEN_SECRET_FILE": os.path.join(tmp, "token"),
               "HERALD_ADMIN_API_KEY_FILE": os.path.join(tmp, "key")}
        r = run(["sh", script, "--print-config"], env=env)
        if r.returncode != 0 or not re.search(r"^secret = <set>", r.stdout, re.M) or \
                not re.search(r"^api_key = <set>", r.stdout, re.M):
            fail(f"entrypoint: --print-config does not show both secrets set: {r.stdout}{r.stderr}")
        if "HERALD_" in r.stderr:
            fail(f"entrypoint: herald warns about a variable: {r.stderr}")
        env["HERALD_ADMIN_API_KEY"] = "both"
        if run(["sh", script, "--print-config"], env=env).returncode == 0:
            fail("entrypoint: accepted both HERALD_ADMIN_API_KEY and its _FILE")
    print("ok docker-entrypoint.sh: HERALD_*_FILE become the secrets herald reads")


def check_mounted_files(src, doc, nodes):
    deploy = os.path.join(src, "deploy")
    r = run(["haproxy", "-c", "-f", os.path.join(deploy, "compose/haproxy.cfg")])
    warnings = [l for l in (r.stdout + r.stderr).splitlines() if "[WARNING]" in l or "[ALERT]" in l]
    unexpected = [w for w in warnings if not re.search(r"could not resolve address 'herald-\d'", w)]
    if r.returncode != 0 or unexpected:
        fail(f"haproxy -c compose/haproxy.cfg: exit {r.returncode}: {unexpected}")
    backends = re.findall(r"^\s*server\s+\S+\s+([\w-]+):7400", open(
        os.path.join(deploy, "compose/haproxy.cfg")).read(), re.M)
    if sorted(backends) != nodes:
        fail(f"haproxy.cfg: servers {backends}, want the nodes {nodes}")
    with open(os.path.join(deploy, "compose/prometheus.yml"), encoding="utf-8") as f:
        prom = yaml.safe_load(f)
    targets = sorted(t for sc in prom["scrape_configs"] if sc["job_name"] == "herald"
                     for st in sc["static_configs"] for t in st["targets"])
    if targets != [f"{n}:7401" for n in nodes]:
        fail(f"prometheus.yml: herald targets {targets}, want each node's admin port 7401")
    prov = os.path.join(deploy, "compose/grafana/provisioning")
    with open(os.path.join(prov, "datasources/prometheus.yml"), encoding="utf-8") as f:
        ds = yaml.safe_load(f)["datasources"]
    if not any(d["type"] == "prometheus" and d["url"] == "http://prometheus:9090" and
               d.get("isDefault") for d in ds):
        fail("grafana datasources: no default prometheus at http://prometheus:9090")
    with open(os.path.join(prov, "dashboards/herald.yml"), encoding="utf-8") as f:
        providers = yaml.safe_load(f)["providers"]
    mounts = [v.split(":")[1] for v in doc["services"]["grafana"]["volumes"]]
    dash_dir = [p["options"]["path"] for p in providers]
    if not any(m.startswith(d.rstrip("/") + "/") and m.endswith("herald-grafana.json")
               for d in dash_dir for m in mounts):
        fail(f"grafana: the dashboard is not mounted under a provider path {dash_dir}")
    print("ok haproxy.cfg (haproxy -c), prometheus.yml targets, Grafana provisioning")


def main():
    herald, src = sys.argv[1], os.path.abspath(sys.argv[2])
    doc, nodes = check_compose(herald, os.path.join(src, "deploy"))
    check_debian_override(os.path.join(src, "deploy"), doc)
    check_dockerfile(herald, src)
    check_entrypoint(herald, src)
    check_mounted_files(src, doc, nodes)
    for p in problems:
        print(f"FAIL: {p}", file=sys.stderr)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
