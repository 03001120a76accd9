"""promql: the metric names and label matchers a PromQL expression uses, and the expressions
in herald's dashboard and alert rules. Shared by check_dashboard.py and check_metrics.py.

Not a PromQL parser: enough for the expressions we write. Strings, label matchers, range
selectors and the label lists of by/without/on/ignoring/group_* are removed first; what is
left that looks like an identifier and is not a function call or a keyword is a metric name.
"""
import json
import re

import yaml

IDENT = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
            "group_right", "offset", "bool", "inf", "nan", "atan2"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def selectors(expr):
    """[(metric, {label: value})] for each metric{...} with its equality matchers (label="v"
    with no template variable in v)."""
    out = []
    for m in re.finditer(r"(" + IDENT + r")\s*\{([^}]*)\}", expr):
        eq = {}
        for lm in re.finditer(r'(' + IDENT + r')\s*(=~|!=|!~|=)\s*"([^"]*)"', m.group(2)):
            if lm.group(2) == "=" and "$" not in lm.group(3):
                eq[lm.group(1)] = lm.group(3)
        out.append((m.group(1), eq))
    return out


def metric_names(expr):
    """The set of metric names expr reads."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)          # strings
    s = re.sub(r"\{[^}]*\}", " ", s)                      # label matchers
    s = re.sub(r"\[[^\]]*\]", " ", s)                      # ranges, subqueries
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    s = re.sub(r"\boffset\s+-?[0-9a-z]+", " ", s)           # offset 5m
    names = set()
    for m in re.finditer(IDENT, s):
        word = m.group(0)
        start = m.start()
        if start > 0 and (s[start - 1].isdigit() or s[start - 1] in ".$"):
            continue                                       # 1e3, 0.5, $var
        rest = s[m.end():].lstrip()
        if rest.startswith("(") or word.lower() in KEYWORDS:
            continue                                       # function or aggregation, keyword
        names.add(word)
    return names


def dashboard_panels(dash):
    """Every panel of a dashboard, rows' nested panels included, in order."""
    def walk(panels):
        for p in panels:
            yield p
            yield from walk(p.get("panels", []))
    return list(walk(dash.get("panels", [])))


def dashboard_exprs(path):
    """[(panel title, expr)] of a Grafana dashboard JSON file."""
    with open(path, encoding="utf-8") as f:
        dash = json.load(f)
    return [(p.get("title", "?"), t["expr"]) for p in dashboard_panels(dash)
            for t in p.get("targets", []) if "expr" in t]


def rule_exprs(path):
    """[(alert or record name, expr)] of a Prometheus rules file."""
    with open(path, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    return [(r.get("alert") or r.get("record"), r["expr"]) for g in doc["groups"]
            for r in g["rules"]]


def family(name, histograms):
    """The metric family a series name belongs to: a histogram's _bucket/_sum/_count count as
    the histogram."""
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in histograms:
            return name[: -len(suffix)]
    return name
