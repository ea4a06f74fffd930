"""EFA that really carries NCCL: the image a multi-node replica runs, the environment that routes NCCL
through the plugin, the spec and policy refusals, and what the plan says.

Upstream rules encoded here:
* vllm-project/vllm v0.33.0 docker/Dockerfile installs neither libfabric nor aws-ofi-nccl;
  docker/Dockerfile.efa adds them (AWS EFA installer 1.51.0: /opt/amazon/efa, /opt/amazon/ofi-nccl/lib)
  and sets NCCL_NET_PLUGIN=ofi NCCL_TUNER_PLUGIN=ofi; .buildkite/scripts/publish-release-images.sh
  publishes it as vllm/vllm-openai:v<version>-efa.
* NCCL (docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html, NCCL_NET_PLUGIN): with no network
  plugin it falls back to its internal IB/socket transports, and EFA is neither, so without the plugin
  traffic goes over TCP sockets with no error.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from inferstack.catalog.vllm_images import DEFAULT_EFA_VLLM_IMAGE, DEFAULT_VLLM_IMAGE, efa_images, vllm_image
from inferstack.conventions import IMAGE_PROVIDES_EFA_ANNOTATION
from inferstack.engine import run_stack
from inferstack.engine.render import kubernetes_objects
from inferstack.presentation.summary import placements
from inferstack.serving.transport import transport
from inferstack.spec import SpecError, StackSpec
from inferstack.spec.pools import EFA_RESOURCE, PoolHardware
from inferstack.stacks import load_stack, load_validated
from inferstack.validation import validate

STACKS = Path(__file__).resolve().parents[1] / "stacks"


def spec(**model) -> dict:
    return {
        "environment": "test",
        "node_pools": [
            {"name": "h100", "instance_types": ["p5.48xlarge"], "max_nodes": 2, "efa": True,
             "capacity": {"on_demand_base": 2}},
            {"name": "l40s", "instance_types": ["g6e.12xlarge"], "max_nodes": 2, "capacity": {"on_demand_base": 2}},
        ],
        "models": [
            {"name": "long", "model": "meta-llama/Llama-3.1-70B-Instruct", "pool": "h100", "tensor_parallel": 8,
             "pipeline_parallel": 2, "max_model_len": 32768, **model},
        ],
    }


def checked(document: dict) -> StackSpec:
    """The document as written, once every layer accepts it."""
    return validate(StackSpec.model_validate(document)).written


def vllm_env(template) -> dict[str, str]:
    container = next(c for c in template["spec"]["containers"] if c["name"] == "vllm")
    return {e["name"]: e.get("value") for e in container["env"]}


def lws_templates(objects):
    lws = next(o for o in objects if o["kind"] == "LeaderWorkerSet")
    template = lws["spec"]["leaderWorkerTemplate"]
    return [template["leaderTemplate"], template["workerTemplate"]]


def test_the_catalog_knows_which_vllm_image_carries_the_efa_stack():
    """Dockerfile.efa's facts as the catalog states them; the stock image carries none."""
    efa = vllm_image(DEFAULT_EFA_VLLM_IMAGE).efa
    assert efa is not None and dict(efa.env) == {"NCCL_NET_PLUGIN": "ofi", "NCCL_TUNER_PLUGIN": "ofi"}
    assert efa.libfabric_prefix == "/opt/amazon/efa" and efa.nccl_net_plugin.startswith("/opt/amazon/ofi-nccl/lib/")
    assert vllm_image(DEFAULT_VLLM_IMAGE).efa is None
    assert DEFAULT_EFA_VLLM_IMAGE == f"{DEFAULT_VLLM_IMAGE}-efa"  # publish-release-images.sh: v<version>-efa
    assert efa_images() == [DEFAULT_EFA_VLLM_IMAGE]


def test_a_multi_node_service_on_efa_runs_the_efa_build_with_nccl_routed_through_the_plugin():
    objects = kubernetes_objects(run_stack(load_stack(STACKS, "prod")))
    for template in lws_templates(objects):
        container = next(c for c in template["spec"]["containers"] if c["name"] == "vllm")
        assert container["image"] == DEFAULT_EFA_VLLM_IMAGE
        assert int(container["resources"]["limits"][EFA_RESOURCE]) > 0
        env = vllm_env(template)
        assert env["NCCL_NET_PLUGIN"] == "ofi" and env["NCCL_TUNER_PLUGIN"] == "ofi" and env["FI_PROVIDER"] == "efa"
    single = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["labels"].get("app.kubernetes.io/component") == "vllm"]
    for deployment in single:
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        assert container["image"] == DEFAULT_VLLM_IMAGE and EFA_RESOURCE not in container["resources"]["limits"]


def test_the_plan_says_which_transport_each_service_uses():
    prod = load_validated(STACKS, "prod")
    rows = {row["model"]: row for row in placements(prod.stack, {})}
    assert rows["llama-70b-long"]["transport"] == "efa"
    assert "NCCL over EFA" in rows["llama-70b-long"]["transport_detail"] and DEFAULT_EFA_VLLM_IMAGE in rows["llama-70b-long"]["transport_detail"]
    assert {row["transport"] for name, row in rows.items() if name != "llama-70b-long"} == {"in-node"}

    over_tcp = checked({**spec(), "models": [{**spec()["models"][0], "pool": "l40s", "tensor_parallel": 4}]})
    model = over_tcp.models[0]
    route = transport(model, PoolHardware(over_tcp.pool("l40s")))
    assert route.kind == "tcp" and route.image == DEFAULT_VLLM_IMAGE and "TCP sockets" in route.describe()


def test_the_stock_image_on_a_multi_node_efa_service_is_refused_at_spec_time():
    with pytest.raises(SpecError) as caught:
        checked(spec(image=DEFAULT_VLLM_IMAGE))
    error = caught.value
    assert error.path == "models[0].image"
    assert "is not known to carry libfabric and the aws-ofi-nccl plugin" in error.problem
    assert "fall back to TCP sockets on EFA pool 'h100'" in error.problem
    assert repr(DEFAULT_EFA_VLLM_IMAGE) in error.fix and "image_provides_efa" in error.fix


def test_a_teams_own_efa_image_is_accepted_when_the_spec_says_so_and_the_pods_say_it_too():
    own = "registry.example.com/ml/vllm-efa:0.33.0-1"
    with pytest.raises(SpecError):
        checked(spec(image=own))
    stack = checked(spec(image=own, image_provides_efa=True))
    objects = kubernetes_objects(run_stack(stack))
    for template in lws_templates(objects):
        assert template["metadata"]["annotations"][IMAGE_PROVIDES_EFA_ANNOTATION] == "true"
        assert vllm_env(template)["NCCL_NET_PLUGIN"] == "ofi"
        assert next(c for c in template["spec"]["containers"] if c["name"] == "vllm")["image"] == own


def test_image_provides_efa_cannot_vouch_for_an_image_the_catalog_knows_has_no_efa():
    with pytest.raises(SpecError) as caught:
        checked(spec(image=DEFAULT_VLLM_IMAGE, image_provides_efa=True))
    error = caught.value
    assert error.path == "models[0].image_provides_efa"
    assert "is in the catalog, which knows it carries no libfabric or aws-ofi-nccl plugin" in error.problem


def test_docker_hubs_own_spellings_of_the_efa_build_are_the_same_image():
    for reference in (f"docker.io/{DEFAULT_EFA_VLLM_IMAGE}", f"index.docker.io/{DEFAULT_EFA_VLLM_IMAGE}"):
        assert vllm_image(reference) == vllm_image(DEFAULT_EFA_VLLM_IMAGE)
        stack = checked(spec(image=reference))
        assert transport(stack.models[0], PoolHardware(stack.pool("h100"))).kind == "efa"
