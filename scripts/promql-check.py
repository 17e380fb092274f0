#!/usr/bin/env python3
"""Parses every PromQL expression the Grafana dashboard and the Helm chart's
alert rules use, with promql-parser (the Rust PromQL parser's Python
binding), so a typo in a query fails CI rather than an operator's dashboard.
Usage: promql-check.py DASHBOARD.json ALERTS.yaml"""
import json
import sys

import promql_parser
import yaml


def dashboard_exprs(path):
    def walk(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "expr" and isinstance(v, str):
                    yield v
                else:
                    yield from walk(v)
        elif isinstance(node, list):
            for v in node:
                yield from walk(v)

    return list(walk(json.load(open(path))))


def alert_exprs(path):
    return [(r["alert"], r["expr"]) for g in yaml.safe_load(open(path)) for r in g["rules"]]


def main():
    dash, alerts = sys.argv[1], sys.argv[2]
    # Grafana's variables are substituted before Prometheus sees a query.
    grafana = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h"}
    failed = 0
    checked = 0
    for expr in dashboard_exprs(dash):
        q = expr
        for k, v in grafana.items():
            q = q.replace(k, v)
        try:
            promql_parser.parse(q)
            checked += 1
        except Exception as e:  # the parser raises ValueError with the position
            print(f"{dash}: {expr}\n  {e}", file=sys.stderr)
            failed += 1
    for name, expr in alert_exprs(alerts):
        try:
            promql_parser.parse(expr)
            checked += 1
        except Exception as e:
            print(f"{alerts}: {name}: {expr}\n  {e}", file=sys.stderr)
            failed += 1
    if failed:
        sys.exit(1)
    print(f"promql-check: {checked} expressions parse")


if __name__ == "__main__":
    main()
