"""Names that several layers must agree on: node labels, the model cache path, service accounts.

One definition here, so the AWS layer that sets a label and the serving layer that selects on it
cannot drift apart.
"""

LABEL_PREFIX = "inferstack.dev"
POOL_LABEL = f"{LABEL_PREFIX}/pool"                  # node label: the pool name
CAPACITY_LABEL = f"{LABEL_PREFIX}/capacity"           # node label: on-demand | spot | reserved
GPU_LABEL = f"{LABEL_PREFIX}/gpu"                     # node label: catalog GPU name, e.g. H100
SHARING_LABEL = f"{LABEL_PREFIX}/gpu-sharing"         # node label: none | mig | time_slicing | mps
TIER_LABEL = f"{LABEL_PREFIX}/tier"                   # workload label: online | standard | batch (policies read it)
# Pod annotation: the spec states the (uncatalogued) vLLM image carries libfabric + aws-ofi-nccl (policies read it).
IMAGE_PROVIDES_EFA_ANNOTATION = f"{LABEL_PREFIX}/image-provides-efa"
MODEL_ANNOTATION = f"{LABEL_PREFIX}/model"  # the Hugging Face id a vLLM pod serves, for the policy pack
EKS_CAPACITY_LABEL = "eks.amazonaws.com/capacityType"  # set by EKS: ON_DEMAND | SPOT | CAPACITY_BLOCK
MIG_CONFIG_LABEL = "nvidia.com/mig.config"             # selects the mig-parted config for a node
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"  # selects the device-plugin sharing config

GPU_TAINT_KEY = "nvidia.com/gpu"                       # every GPU pool: nvidia.com/gpu=true:NoSchedule

# The NVMe instance store: nodeadm's RAID0/RAID10 array is mounted at /mnt/k8s-disks/0; the model
# cache is a folder on it that pods mount as a hostPath, so weights survive pod restarts on the node.
NVME_MOUNT = "/mnt/k8s-disks/0"
MODEL_CACHE_HOST_PATH = f"{NVME_MOUNT}/model-cache"
MODEL_CACHE_MOUNT = "/models"                          # where pods see the cache

# Serving pods read weights from S3 with this service account (EKS Pod Identity association).
MODEL_READER_SERVICE_ACCOUNT = "model-reader"
KARPENTER_CAPACITY_LABEL = "karpenter.sh/capacity-type"  # set by Karpenter: on-demand | reserved | spot
KARPENTER_SERVICE_ACCOUNT = "karpenter"
KARPENTER_DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"  # pod annotation: Karpenter leaves its node alone  # the Karpenter chart's service account for release name "karpenter"
# Batch jobs also read their input and write their results, with this one (batch namespace only).
BATCH_RUNNER_SERVICE_ACCOUNT = "batch-runner"
MANAGED_BY = {"app.kubernetes.io/managed-by": "inferstack"}
