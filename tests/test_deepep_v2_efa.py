"""deepep_v2 is not offered across EFA nodes (issue 25 item 10): what it needs there, the stack cannot provide.

Upstream, read for this decision:
* vLLM 0.33.0 wheel, vllm/distributed/device_communicators/all2all.py `DeepEPV2All2AllManager._check_gin_support`
  (lines 1074-1100): after an all-reduce on the EP group it asks NCCL for the communicator's GIN type
  (vllm/utils/nccl.py `query_nccl_gin_type`, line 88) and raises "DeepEPv2 requires NCCL GIN (GPU-Initiated
  Networking)" when it is 0; only EP_DISABLE_GIN skips the check. vllm/utils/import_utils.py
  `deep_ep_v2_unavailable_reason` (lines 472-498) also needs deep_ep.ElasticBuffer and NCCL >= 2.30.4.
* NVIDIA/nccl v2.30.7 src/gin/gin_host.cc line 19 (NCCL_GIN_ENABLE, default 1), src/plugin/gin.cc
  `initPluginLibsOnceFunc` (NCCL_GIN_PLUGIN, else libnccl-gin.so, then the NET plugin's own GIN, then the internal
  IB GDAKI and proxy backends): GIN is on by default, so no environment variable is missing; a backend is.
* aws/aws-ofi-nccl v1.21.0 doc/gin-getting-started.md: GIN support starts in plugin 1.21 and needs NCCL 2.31.2-1 and
  GDRCopy 2.5 or later (EFA-GDA also NCCL_GIN_TYPE=5, NCCL_SYM_GIN_KERNELS_ENABLE=0, P5en/P6-B200/P6-B300 only);
  src/rdma/gin/nccl_ofi_gin_api.cpp lines 62-73 fail GIN init without a GDRCopy 2.5 handle, and
  src/nccl_ofi_gdrcopy.cpp opens it with gdr_open, which opens /dev/gdrdrv (NVIDIA/gdrcopy src/gdrapi.c).
  The EFA installer 1.51.0 in vllm/vllm-openai:v0.33.0-efa ships plugin 1.22.0 (AWS EFA changelog), so the plugin
  is there; the node side is not:
* awslabs/amazon-eks-ami #2736 adds gdrdrv to the AL2023 NVIDIA AMI only as a build option
  (`enable_nvidia_gdrcopy_driver`, default "false"); the GPU operator installs gdrdrv only as a sidecar of its own
  driver container (release notes 24.3.0), which this stack turns off (the AMI owns the driver); a hostPath
  /dev/gdrdrv needs a privileged pod (NVIDIA/gdrcopy#291), which the serving pods never are.
So the spec refuses deepep_v2 on a replica over several nodes, with vLLM's reason and the one backend that works.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from stack_files import refusal

from inferstack.catalog.all2all_backends import ALL2ALL_BACKENDS
from inferstack.cli import main
from inferstack.spec import StackSpec
from inferstack.validation import validate

REPO = Path(__file__).resolve().parents[1]
VLLM_SRC = Path("/tmp/vllm/src/vllm")  # the vLLM 0.33.0 wheel, extracted; the upstream check skips without it
GIN_REFUSAL = "DeepEPv2 requires NCCL GIN"

WIDE = {
    "environment": "wide",
    "region": "us-east-2",
    "node_pools": [{"name": "h200", "instance_types": ["p5en.48xlarge"], "min_nodes": 2, "max_nodes": 2,
                    "efa": True, "capacity": {"on_demand_base": 2}}],
    "models": [{"name": "deepseek", "model": "deepseek-ai/DeepSeek-V3", "pool": "h200", "data_parallel": 16,
                "data_parallel_local": 8, "expert_parallel": True, "all2all_backend": "deepep_v2",
                "max_model_len": 32768, "max_num_seqs": 32, "kv_cache_dtype": "fp8"}],
}


def test_only_allgather_reducescatter_crosses_efa_nodes():
    crossing = {name for name, reach in ALL2ALL_BACKENDS.items() if reach.crosses_nodes and reach.crosses_efa}
    assert crossing == {"allgather_reducescatter"}
    v2 = ALL2ALL_BACKENDS["deepep_v2"]
    assert v2.crosses_nodes and not v2.crosses_efa
    assert GIN_REFUSAL in v2.efa_refusal and "gdrdrv" in v2.efa_refusal
    assert "all2all.py" in v2.source and "gin-getting-started.md" in v2.source and "amazon-eks-ami" in v2.source
    for name, reach in ALL2ALL_BACKENDS.items():   # every backend that reaches beyond a node but not over EFA says why
        assert (reach.efa_refusal is not None) == (reach.crosses_nodes and not reach.crosses_efa), name


def test_the_refusal_quotes_vllm_and_the_upstream_message_is_vllms():
    if not (VLLM_SRC / "distributed/device_communicators/all2all.py").exists():
        pytest.skip("the vLLM 0.33.0 wheel is not extracted at /tmp/vllm")
    source = (VLLM_SRC / "distributed/device_communicators/all2all.py").read_text()
    assert f'"{GIN_REFUSAL} (GPU-Initiated Networking). "' in source
    assert "class DeepEPV2All2AllManager" in source and "def _check_gin_support" in source


def test_deepep_v2_across_efa_nodes_is_refused_with_the_field_vllms_reason_and_the_fix():
    error = refusal(copy.deepcopy(WIDE))
    assert error.path == "models[0].all2all_backend"
    assert "deepep_v2 does not run between nodes over EFA, and a replica spans 2 nodes" in error.problem
    assert GIN_REFUSAL in error.problem and "gdrdrv" in error.problem
    assert "'allgather_reducescatter'" in error.fix and "deepep_v2" not in error.fix
    assert "one node" not in error.fix     # vLLM checks for GIN on one node too: not offered as a way out
    assert str(error).count("To fix:") == 1


def test_the_cli_exits_2_on_it(tmp_path, capsys):
    stack = tmp_path / "wide.yaml"
    stack.write_text(yaml.safe_dump(WIDE))
    assert main(["plan", str(stack)]) == 2
    said = capsys.readouterr()
    assert "models[0].all2all_backend" in said.err + said.out and GIN_REFUSAL in said.err + said.out


def test_the_fix_it_names_is_accepted():
    for backend in ("allgather_reducescatter", None):
        document = copy.deepcopy(WIDE)
        document["models"][0]["all2all_backend"] = backend
        validate(StackSpec.model_validate(document))


def test_other_refusals_offer_only_the_backend_that_crosses():
    for backend in ("deepep_low_latency", "deepep_high_throughput", "nixl_ep", "moonep"):
        document = copy.deepcopy(WIDE)
        document["models"][0]["all2all_backend"] = backend
        error = refusal(document)
        assert error.path == "models[0].all2all_backend" and "deepep_v2" not in error.fix, backend
        assert "'allgather_reducescatter'" in error.fix


def test_the_readme_no_longer_offers_deepep_v2_across_nodes():
    readme = (REPO / "README.md").read_text()
    section = readme.split("**Expert and data parallelism.**", 1)[1].split("\n## ", 1)[0]
    assert "Across EFA nodes only\n`allgather_reducescatter` is accepted" in section or \
        "Across EFA nodes only `allgather_reducescatter` is accepted" in section.replace("\n", " ")
    assert "all2all_backend: deepep_v2" not in section
    assert "`allgather_reducescatter` and `deepep_v2`" not in readme
