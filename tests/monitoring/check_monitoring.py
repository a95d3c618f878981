#!/usr/bin/env python3
"""Static checks of manifests/monitoring (ctest monitoring.static):
- prometheus-rule.yaml's spec holds exactly the groups of konn-rules.yaml;
- konn-dashboard.json is a dashboard whose every target has an expression, and it names no
  metric outside konn's prefixes (besides Prometheus' own `up`);
- an overlay with the opt-in line uncommented renders with kubectl kustomize and then holds the
  PrometheusRule, the ServiceMonitor, the metrics Services and the dashboard ConfigMap.
Usage: check_monitoring.py <source dir> <kubectl>"""
import json
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

src, kubectl = sys.argv[1], sys.argv[2]
mon = src + "/manifests/monitoring"
errors = []

rules = yaml.safe_load(open(mon + "/konn-rules.yaml"))
cr = yaml.safe_load(open(mon + "/prometheus-rule.yaml"))
if cr.get("kind") != "PrometheusRule":
    errors.append("prometheus-rule.yaml is not a PrometheusRule")
if cr.get("spec") != rules:
    errors.append("prometheus-rule.yaml's spec differs from konn-rules.yaml: regenerate it")

dash = json.load(open(mon + "/konn-dashboard.json"))
exprs = [t.get("expr", "") for p in dash.get("panels", []) for t in p.get("targets", [])]
if not exprs or any(not e for e in exprs):
    errors.append("a dashboard target has no expression")
for e in exprs:
    for name in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", e):
        if name.endswith(("_total", "_count", "_seconds", "_bucket")) and not name.startswith(
                ("konn_", "konnectivity_network_proxy_")):
            errors.append(f"dashboard names a foreign metric {name}")

for overlay, line in (("overlays/http-connect-tcp-ha", "  # - ../../monitoring"),
                      ("overlays/grpc-uds/cluster", "  # - ../../../monitoring")):
    tmp = tempfile.mkdtemp(prefix="konn-mon-")
    try:
        shutil.copytree(src + "/manifests", tmp + "/manifests")
        k = f"{tmp}/manifests/{overlay}/kustomization.yaml"
        text = open(k).read()
        if line not in text:
            errors.append(f"{overlay}: no opt-in line {line.strip()!r}")
            continue
        open(k, "w").write(text.replace(line, line.replace("# ", "", 1)))
        out = subprocess.run([kubectl, "kustomize", f"{tmp}/manifests/{overlay}"],
                             capture_output=True, text=True)
        if out.returncode != 0:
            errors.append(f"{overlay} with monitoring does not render: {out.stderr}")
            continue
        kinds = {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(out.stdout) if d}
        for want in (("PrometheusRule", "konn"), ("ServiceMonitor", "konn"),
                     ("Service", "konnectivity-server-metrics"),
                     ("Service", "konnectivity-agent-metrics"),
                     ("ConfigMap", "konn-grafana-dashboard")):
            if want not in kinds:
                errors.append(f"{overlay} with monitoring lacks {want}")
    finally:
        shutil.rmtree(tmp)

for e in errors:
    print("error:", e)
print("monitoring: %d problems" % len(errors))
sys.exit(1 if errors else 0)
