"""A multi-node replica's leader waits, under its startup probe, for the slowest member to start.

Upstream: kubernetes-sigs/lws v0.10.0 api/leaderworkerset/v1/leaderworkerset_types.go: startupPolicy LeaderCreated
creates the worker StatefulSet once the leader pod exists, and restartPolicy RecreateGroupOnPodRestart recreates the
whole group when any pod restarts; vLLM 0.33.0 vllm/v1/engine/utils.py:1403-1445 wait_for_engine_startup: the API
server answers /health only once every engine, remote ones included, is up; Kubernetes docs ("Configure Liveness,
Readiness and Startup Probes"): the kubelet restarts a container whose startup probe failed failureThreshold times
periodSeconds apart. The slowest member is one on a node still to be launched: the plan's cold start per replica.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from inferstack.cli import main

STACKS = Path(__file__).resolve().parents[1] / "stacks"


def test_the_leaders_startup_budget_covers_a_cold_members_start(tmp_path):
    out = tmp_path / "out"
    assert main(["render", "prod", "--stacks-dir", str(STACKS), "--out", str(out)]) == 0
    plan = json.loads((out / "plan.json").read_text())
    cold = {m["model"]: sum(part["seconds"] for part in m["cold_start"]) for m in plan["time_to_serving"]["models"]}
    groups = [o for o in (yaml.safe_load(p.read_text()) for p in (out / "kubernetes").glob("*.yaml"))
              if o["kind"] == "LeaderWorkerSet"]
    assert groups
    for lws in groups:
        service = lws["metadata"]["labels"]["app.kubernetes.io/name"]
        template = lws["spec"]["leaderWorkerTemplate"]
        assert lws["spec"]["startupPolicy"] == "LeaderCreated"
        assert template["restartPolicy"] == "RecreateGroupOnPodRestart"
        (vllm,) = [c for c in template["leaderTemplate"]["spec"]["containers"] if c["name"] == "vllm"]
        probe = vllm["startupProbe"]
        assert probe["failureThreshold"] * probe["periodSeconds"] >= cold[service], service
