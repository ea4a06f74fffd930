"""Issue 26 item 8's refusals through the CLI: exit 2, one line naming the field, the value and the fix, and
nothing rendered. The upstream rules each encodes are cited in tests/test_zone_offerings.py,
tests/test_aws_rejections.py and tests/test_auto_placement_roles.py."""

from __future__ import annotations

import pytest
import yaml

from inferstack.cli import main

RESERVATION = {"kind": "odcr", "id": "cr-0123456789abcdef0"}
L4 = {"name": "l4", "instance_types": ["g6.12xlarge"], "max_nodes": 2, "capacity": {"on_demand_base": 1}}
CHAT = {"name": "chat", "model": "Qwen/Qwen2.5-7B-Instruct-AWQ", "quantization": "awq", "pool": "auto",
        "max_model_len": 8192, "max_num_seqs": 4}

CASES = {
    "a zone that does not offer the pool's type": (
        {"region": "eu-west-2", "node_pools": [{"name": "a100", "instance_types": ["p4d.24xlarge"], "max_nodes": 1,
                                                "availability_zones": ["eu-west-2c"]}]},
        "node_pools[0].availability_zones[0]", "not in eu-west-2c", "use eu-west-2a or eu-west-2b instead",
    ),
    "a reservation in another region": (
        {"node_pools": [{**L4, "capacity": {"on_demand_base": 1,
                                            "reservation": {**RESERVATION, "availability_zone": "us-west-2b"}}}]},
        "node_pools[0].capacity.reservation.availability_zone", "outside the stack's region us-east-1",
        "use a reservation in us-east-1",
    ),
    "a reservation zone the region does not have": (
        {"node_pools": [{**L4, "capacity": {"on_demand_base": 1,
                                            "reservation": {**RESERVATION, "availability_zone": "us-east-1z"}}}]},
        "node_pools[0].capacity.reservation.availability_zone", "'us-east-1z' is not an availability zone",
        "describe-capacity-reservations",
    ),
    "an online auto service with only batch pools": (
        {"node_pools": [{**L4, "role": "batch", "capacity": {"on_demand_base": 0}}], "models": [CHAT]},
        "models[0].pool", "serving pools only", "role 'serving'",
    ),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_render_refuses_with_exit_2_at_the_field(case, tmp_path, capsys):
    document, path, problem, fix = CASES[case]
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    (stacks / "bad.yaml").write_text(yaml.safe_dump({"environment": "test", **document}))
    out = tmp_path / "out"

    code = main(["render", "bad", "--stacks-dir", str(stacks), "--out", str(out)])

    captured = capsys.readouterr()
    message = captured.err.strip()
    assert code == 2 and "Traceback" not in captured.err + captured.out
    assert f"bad.yaml: {path}: " in message and problem in message and fix in message
    assert not out.exists()
