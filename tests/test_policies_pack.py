"""The pack as `pulumi preview --policy-pack policies` starts it: `python -m pulumi.policy <engine> policies`
runs policies/__main__.py, which serves the analyzer over gRPC on 127.0.0.1. The test talks to it the way
the engine does (GetAnalyzerInfo, Configure, Analyze), then stops it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from google.protobuf import empty_pb2, struct_pb2
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc

from inferstack.policies.rules import PACK_NAME, POLICIES

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT_SECONDS = 60


@pytest.fixture
def analyzer():
    process = subprocess.Popen(
        [sys.executable, "-u", "-m", "pulumi.policy", "127.0.0.1:0", str(REPO / "policies")],
        cwd=REPO / "policies",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = process.stdout.readline().strip()
        if not port.isdigit():
            process.kill()
            pytest.fail(f"the pack printed no port: {port!r} {process.communicate(timeout=10)[1]}")
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=START_TIMEOUT_SECONDS)
        yield analyzer_pb2_grpc.AnalyzerStub(channel)
        channel.close()
    finally:
        process.terminate()
        process.wait(timeout=10)


def _struct(value: dict) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(value)
    return struct


def test_the_pack_serves_every_rule_over_grpc_and_reports_violations(analyzer):
    info = analyzer.GetAnalyzerInfo(empty_pb2.Empty(), timeout=30)
    assert info.name == PACK_NAME
    assert [p.name for p in info.policies] == [p.name for p in POLICIES]

    analyzer.Configure(
        analyzer_pb2.ConfigureAnalyzerRequest(
            policyConfig={
                "budget-at-max-scale": analyzer_pb2.PolicyConfig(
                    enforcementLevel=analyzer_pb2.MANDATORY, properties=_struct({"maxUsdPerHour": 10})
                )
            }
        ),
        timeout=30,
    )
    urn = "urn:pulumi:prod::inferstack::kubernetes:helm.sh/v3:Release::keda"
    response = analyzer.Analyze(
        analyzer_pb2.AnalyzeRequest(
            type="kubernetes:helm.sh/v3:Release",
            properties=_struct({"chart": "keda", "version": "2.x", "values": {}}),
            urn=urn,
            name="keda",
        ),
        timeout=30,
    )
    assert [(d.policyName, d.enforcementLevel) for d in response.diagnostics] == [
        ("helm-releases-pinned", analyzer_pb2.MANDATORY)
    ]
    assert "installs chart 'keda' at version '2.x'" in response.diagnostics[0].message

    group = analyzer_pb2.AnalyzerResource(
        type="aws:eks/nodeGroup:NodeGroup",
        urn="urn:pulumi:prod::inferstack::aws:eks/nodeGroup:NodeGroup::gpus",
        name="gpus",
        properties=_struct(
            {"instanceTypes": ["p5.48xlarge"], "capacityType": "ON_DEMAND", "scalingConfig": {"minSize": 1, "maxSize": 2},
             "labels": {"inferstack.dev/pool": "gpus"}}
        ),
    )
    provider = analyzer_pb2.AnalyzerResource(  # the budget policy prices nodes in the AWS provider's region
        type="pulumi:providers:aws", urn="urn:pulumi:prod::inferstack::pulumi:providers:aws::aws", name="aws",
        properties=_struct({"region": "us-east-1"}),
    )
    stack = analyzer.AnalyzeStack(analyzer_pb2.AnalyzeStackRequest(resources=[provider, group]), timeout=30)
    budget = [d for d in stack.diagnostics if d.policyName == "budget-at-max-scale"]
    assert len(budget) == 1 and "over the budget of $10.00/h" in budget[0].message


def test_runner_props_equal_what_a_protobuf_struct_carries():
    """The runner builds the analyzer's view of each resource directly; it must equal the gRPC round trip."""
    from google.protobuf import json_format, struct_pb2

    from inferstack.engine import run_stack
    from inferstack.policies.runner import _wire
    from inferstack.stacks import load_stack

    recording = run_stack(load_stack(Path(__file__).resolve().parents[1] / "stacks", "prod"))
    for resource in recording.resources:
        struct = struct_pb2.Struct()
        struct.update(resource.inputs)
        assert _wire(resource.inputs) == json_format.MessageToDict(struct), resource.name
