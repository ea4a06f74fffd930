"""Request headers the gateway, the endpoint picker and the policies agree on, in one place."""

# The routing header body-based routing sets from the request body's `model`; the HTTPRoutes match it.
MODEL_HEADER = "X-Gateway-Model-Name"
# The request header the picker reads the InferenceObjective's name from (llm-d-router v0.10.0
# pkg/epp/metadata/consts.go:42; handlers/request.go:54; requestcontrol/director.go getInferenceObjective: no
# header, or no objective of that name, is priority 0).
OBJECTIVE_HEADER = "x-llm-d-inference-objective"
# The header the picker's flow control keys its per-tenant queues on, and the deprecated aliases it reads when the
# current name is absent (llm-d-router v0.10.0 pkg/epp/metadata/consts.go:38-40 FlowFairnessIDKey,
# OldFlowFairnessIDKey, OldObjectiveKey; GetLowerCaseHeaderValue 89-101). The gateway sets it from the verified
# tenant, so a client's own copies are removed at the edge.
FAIRNESS_HEADER = "x-llm-d-inference-fairness-id"
DEPRECATED_PICKER_HEADERS = ("x-gateway-inference-fairness-id", "x-gateway-inference-objective")
# The picker's other control headers a client could set to steer it (llm-d-router v0.10.0
# pkg/epp/util/request/headers.go InputControlHeaders, metadata/consts.go): the model name the server is sent
# (a tenant would reach a model its authorization never saw), the SLO hints SLO-aware scheduling ranks by, and the
# endpoint subset to pick from. The video metadata headers stay: they describe the request's own content.
PICKER_CONTROL_HEADERS = (
    "x-llm-d-model-name-rewrite", "x-gateway-model-name-rewrite",
    "x-llm-d-slo-ttft-ms", "x-slo-ttft-ms", "x-llm-d-slo-tpot-ms", "x-slo-tpot-ms",
    "x-gateway-destination-endpoint-subset",
)
