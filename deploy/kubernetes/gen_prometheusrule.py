#!/usr/bin/python3
"""Writes overlays/production/prometheusrule.yaml: infera's alert rules
(deploy/prometheus/alerts.yml) wrapped in a Prometheus Operator
PrometheusRule. Run after editing alerts.yml; tests/deploy checks the two
agree. Tooling only (Debian's python3-yaml)."""
import os

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "prometheus", "alerts.yml")
OUT = os.path.join(HERE, "overlays", "production", "prometheusrule.yaml")


class Dumper(yaml.SafeDumper):
    pass


def str_presenter(dumper, data):
    # Multi-line expressions stay readable block scalars.
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


Dumper.add_representer(str, str_presenter)


def main():
    with open(SRC) as f:
        groups = yaml.safe_load(f)["groups"]
    doc = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
           "metadata": {"name": "infera", "labels": {"app.kubernetes.io/name": "infera"}},
           "spec": {"groups": groups}}
    head = ("# infera's alert rules (deploy/prometheus/alerts.yml) for the Prometheus\n"
            "# Operator. Written by deploy/kubernetes/gen_prometheusrule.py: edit\n"
            "# alerts.yml and run it again (tests/deploy checks that the two agree).\n")
    with open(OUT, "w") as f:
        f.write(head + yaml.dump(doc, Dumper=Dumper, sort_keys=False, width=120, indent=2))


if __name__ == "__main__":
    main()
