#!/usr/bin/env python3
"""check_example_conf: gateway/herald.example.conf documents every setting herald has.

Every [section] key that `herald --print-config` prints must appear in the example file under
the same section, with the default as its value (the two secrets excepted: they have none and
carry a replace-me placeholder), with a comment of its own on the line right above it, and
marked (R) at the start of that comment exactly when `herald --help` says the key "reloads on
SIGHUP". A key in the file that herald does not print fails too (a removed or renamed setting).
Finally `herald --check-config` must accept the file.

Usage: check_example_conf.py HERALD EXAMPLE_CONF
"""
import re
import subprocess
import sys

SECRETS = {("admin", "api_key"), ("auth", "secret")}


def run(*args):
    return subprocess.run(args, check=True, capture_output=True, text=True, timeout=30).stdout


def parse_ini(text):
    """{(section, key): value} from herald's INI output."""
    out, section = {}, None
    for line in text.splitlines():
        line = line.strip()
        m = re.fullmatch(r"\[([a-z_]+)\]", line)
        if m:
            section = m.group(1)
        elif line and not line.startswith(";"):
            key, _, value = line.partition("=")
            out[(section, key.strip())] = value.strip()
    return out


def reloadable(help_text):
    """{(section, key)} that `herald --help` marks "reloads on SIGHUP"."""
    out, section = set(), None
    for line in help_text.splitlines():
        m = re.fullmatch(r"\[([a-z_]+)\]", line.strip())
        if m:
            section = m.group(1)
            continue
        m = re.match(r"\s+key ([a-z_]+), ", line)
        if m and section and "reloads on SIGHUP" in line:
            out.add((section, m.group(1)))
    return out


def parse_example(path):
    """{(section, key): (value, [comment lines directly above], line number)}."""
    out, section, comments = {}, None, []
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if line.startswith(";"):
                comments.append(line)
                continue
            m = re.fullmatch(r"\[([a-z_]+)\]", line.strip())
            if m:
                section, comments = m.group(1), []
            elif line.strip():
                key, sep, value = line.partition("=")
                if not sep:
                    raise SystemExit(f"{path}:{n}: not a key = value line: {line!r}")
                if (section, key.strip()) in out:
                    raise SystemExit(f"{path}:{n}: [{section}] {key.strip()} appears twice")
                out[(section, key.strip())] = (value.strip(), comments, n)
                comments = []
            else:
                comments = []
    return out


def main():
    herald, path = sys.argv[1], sys.argv[2]
    effective = parse_ini(run(herald, "--print-config"))
    reloads = reloadable(run(herald, "--help"))
    example = parse_example(path)
    problems = []
    if not effective:
        problems.append("herald --print-config printed no settings")
    for (section, key), default in effective.items():
        name = f"[{section}] {key}"
        if (section, key) not in example:
            problems.append(f"{name} is missing (herald --print-config has it, default {default!r})")
            continue
        value, comments, n = example[(section, key)]
        if (section, key) in SECRETS:
            if "replace-me" not in value:
                problems.append(f"line {n}: {name} should hold a replace-me placeholder")
        elif value != default:
            problems.append(f"line {n}: {name} = {value!r}, but its default is {default!r}")
        # The comment block right above the key: its last line must say something, and its
        # first line starts with (R) exactly for the keys a reload applies.
        if not comments or not comments[-1].strip(";").strip():
            problems.append(f"line {n}: {name} has no comment of its own right above it")
            continue
        block = comments
        if "" in [c.strip(";").strip() for c in comments]:
            last_blank = max(i for i, c in enumerate(comments) if not c.strip(";").strip())
            block = comments[last_blank + 1:]
        has_mark = block[0].lstrip(";").strip().startswith("(R)")
        if has_mark != ((section, key) in reloads):
            want = "marked (R)" if (section, key) in reloads else "not marked (R)"
            problems.append(f"line {n}: {name} should be {want} (herald --help)")
    for (section, key), (_, _, n) in example.items():
        if (section, key) not in effective:
            problems.append(f"line {n}: [{section}] {key} is not a setting herald prints")
    check = subprocess.run([herald, "--check-config", path], capture_output=True, text=True,
                           timeout=30)
    if check.returncode != 0:
        problems.append(f"herald --check-config failed: {check.stdout}{check.stderr}")
    if problems:
        for p in problems:
            print(f"FAIL: {path}: {p}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {len(effective)} settings, each in {path} with its default, a comment and "
          f"its (R) mark ({len(reloads)} reload on SIGHUP)")


if __name__ == "__main__":
    main()
