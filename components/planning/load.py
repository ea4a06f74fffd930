"""The steady state of one replica under load: how many sequences decode, how long a step and a first token take.

In steady state every request spends its prompt's chunks in prefill and `output - 1` steps decoding, so
with B sequences decoding, B / (output - 1) prompts arrive per step. A prompt is cut into chunks of what
`max_num_batched_tokens` leaves beside the decode tokens; shorter prompts that arrive between steps share
one. So steps are of two kinds, decode-only and decode plus a prompt chunk, and the inter-token latency
is their mean: long prompts and bursts stretch it (engine_step has each step's time). Two ways to load
a replica:

- closed loop (`at_concurrency`): C requests always in the replica, as `vllm bench serve
  --max-concurrency C` runs; Little's law over one request (first token, then output - 1 steps) fixes B;
- open loop (`at_request_rate`): requests arrive at a rate; B = rate x (output - 1) x inter-token latency.

Admission is bounded by max_num_seqs and by the KV cache (sequences at their mean length, as vLLM admits
while blocks are free and preempts when full; a cached prefix is held once). Time to first token is the
prompt's chunk steps, an M/D/1 wait for the prompt tokens ahead of it (a step carries as many as its room
holds), and half the step under way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from inferstack.planning.engine_step import Device, Shard, StepConstants, StepTime, Windowed, step_time


BISECTION_STEPS = 30   # halvings of the search interval: 2^-30 of it, far below what any figure prints


@dataclass(frozen=True)
class Workload:
    """Mean request shape; `cached_prefix_tokens` of each prompt are served from the prefix cache (held once, shared),
    `transferred_tokens` arrive as KV from a prefill engine (a P/D decode engine holds them per sequence and computes
    only the rest)."""

    input_tokens: int
    output_tokens: int
    cached_prefix_tokens: int = 0
    transferred_tokens: int = 0

    @property
    def computed_prompt_tokens(self) -> int:
        return self.input_tokens - self.cached_prefix_tokens - self.transferred_tokens

    @property
    def mean_context(self) -> float:
        """A decoding sequence's mean context: its prompt and half its output."""
        return self.input_tokens + self.output_tokens / 2

    @property
    def held_tokens(self) -> float:
        """KV tokens one running sequence holds on average; the cached prefix is held once, shared."""
        return self.computed_prompt_tokens + self.transferred_tokens + self.output_tokens / 2


@dataclass(frozen=True)
class Engine:
    """A replica for the load model: its shard, its device, and vLLM's limits on a step."""

    shard: Shard
    device: Device
    pipeline_parallel: int
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_cache_bytes: int                 # one device's KV cache, which running sequences fill
    kept_kv: Windowed                   # what a running sequence keeps of it: its KV (at most a window) and a draft's
    constants: StepConstants            # the step model's efficiencies and overheads (engine_step.STATED)


@dataclass(frozen=True)
class StepMix:
    """The steps of a steady state: decode-only steps, and steps that also carry a prompt chunk."""

    decode_step: StepTime           # a step with only decoding sequences
    chunk_step: StepTime            # a step that also runs a prompt chunk
    chunk_share: float              # share of steps that carry a chunk
    chunk_tokens: float             # prompt tokens in such a step
    chunks_per_prompt: float        # chunk steps one prompt takes (fractional: a share of a step's room)
    prefill_load: float             # share of the steps' prompt room the arriving prompts use

    @property
    def mean_seconds(self) -> float:
        return (1 - self.chunk_share) * self.decode_step.seconds + self.chunk_share * self.chunk_step.seconds


@dataclass(frozen=True)
class LoadPoint:
    """One steady state of a replica."""

    running: float              # sequences admitted (decoding or prefilling)
    decoding: float             # sequences decoding in a step
    steps: StepMix              # a pipeline stage's steps when pipeline parallel
    inter_token_seconds: float | None   # None when no token follows the first (one-token outputs)
    first_token_seconds: float
    requests_per_second: float
    output_tokens_per_second: float
    limit: str                  # what bounds the running sequences: 'load', 'max_num_seqs', 'kv_cache'
    saturated: bool             # the replica cannot keep up with the offered load


def kv_share(engine: Engine, workload: Workload, running: float) -> float:
    """Share of the KV cache `running` sequences of the workload fill, the shared prefix held once."""
    kept = engine.kept_kv
    return (running * kept.over(workload.held_tokens) + kept.over(workload.cached_prefix_tokens)) / engine.kv_cache_bytes


def admission_limit(engine: Engine, workload: Workload) -> tuple[float, str]:
    """Most sequences the replica runs at once, and which limit binds: the KV cache by the bytes each sequence keeps
    at its mean length (a windowed layer at most its window)."""
    kept = engine.kept_kv
    by_kv = max(0.0, engine.kv_cache_bytes - kept.over(workload.cached_prefix_tokens)) / kept.over(workload.held_tokens)
    if engine.max_num_seqs <= by_kv:
        return float(engine.max_num_seqs), "max_num_seqs"
    return by_kv, "kv_cache"


def _step_mix(engine: Engine, workload: Workload, decoding: float, share: float, chunk_tokens: float,
              chunks_per_prompt: float, prefill_load: float) -> StepMix:
    """Both kinds of step of one pipeline stage, with `decoding` sequences in that stage. The scheduler's
    per-sequence work is over the sequences a step schedules: the decoding ones and the prompts its chunk
    carries (requests still waiting for their prompt are not scheduled)."""
    prompt = workload.computed_prompt_tokens

    def step(prompt_tokens: float) -> StepTime:
        return step_time(
            engine.shard, engine.device, engine.constants, decoding=decoding, mean_context=workload.mean_context,
            prompt_tokens=prompt_tokens,
            prompt_attended_context=workload.cached_prefix_tokens + workload.transferred_tokens + prompt / 2,
            running=decoding + (math.ceil(prompt_tokens / prompt) if prompt_tokens else 0),
        )

    return StepMix(step(0.0), step(chunk_tokens), share, chunk_tokens, chunks_per_prompt, prefill_load)


def _decode_mix(engine: Engine, workload: Workload, decoding: float) -> StepMix:
    """The step mix of one pipeline stage while `decoding` sequences decode.

    Prompts arrive at decoding / (output - 1) a step and are cut into chunks of what the step budget
    leaves beside the decode tokens (`room`). Chunk steps come at the larger of two rates: a step with
    at least one chunk under Poisson arrivals of chunks, and the prompt tokens over the room (when prompts
    fill every step's budget, every step carries a chunk). Both are continuous in the load, so the
    steady state the closed loop solves for has no jumps.
    """
    pp = engine.pipeline_parallel
    decoding = decoding / pp
    prompt = workload.computed_prompt_tokens
    prompts_per_step = decoding / (workload.output_tokens - 1)
    room = max(1.0, engine.max_num_batched_tokens - decoding)
    chunks_per_prompt = max(1.0, prompt / room)
    share = max(-math.expm1(-prompts_per_step * chunks_per_prompt), prompts_per_step * prompt / room)
    tokens = prompts_per_step * prompt / share if share > 0 else min(room, float(prompt))
    return _step_mix(engine, workload, decoding, share, min(tokens, room), chunks_per_prompt,
                     prompts_per_step * prompt / room)


def _first_token_seconds(mix: StepMix, pipeline_parallel: int) -> float:
    """A prompt's chunk steps, the M/D/1 wait for the prompt tokens before it, and half the step under way. A step
    carries every waiting prompt its room holds, so the queue's load is the prompts' share of that room, not the
    share of steps that carry a chunk."""
    if mix.prefill_load >= 1:
        return math.inf
    service = mix.chunks_per_prompt * mix.chunk_step.seconds
    wait = mix.prefill_load / (2 * (1 - mix.prefill_load)) * service
    return pipeline_parallel * (0.5 * mix.mean_seconds + service + wait)


def _point(engine: Engine, workload: Workload, decoding: float, running: float, limit: str,
           saturated: bool, waiting: float = 0.0) -> LoadPoint:
    """The steady state with `decoding` sequences decoding out of `running` admitted (`waiting` queued)."""
    decode_steps = workload.output_tokens - 1
    pp = engine.pipeline_parallel
    prompt = workload.computed_prompt_tokens
    if decode_steps > 0:
        mix = _decode_mix(engine, workload, decoding)
        inter_token = pp * mix.mean_seconds
        rate = decoding / (decode_steps * inter_token)
        first_token = _first_token_seconds(mix, pp)
        if waiting and rate > 0:
            first_token += waiting / rate
    else:
        # One-token outputs: every step of a stage prefills its share of the running prompts within the
        # budget; pp stages work on pp batches at once. No token follows the first.
        per_stage = min(engine.max_num_batched_tokens, running / pp * prompt)
        mix = _step_mix(engine, workload, 0.0, 1.0, per_stage, max(1.0, prompt / per_stage), 1.0)
        inter_token = None
        rate = per_stage / prompt / mix.chunk_step.seconds
        first_token = (running + waiting) / rate   # Little's law: every request in the replica is a prompt
    return LoadPoint(
        running=running, decoding=decoding, steps=mix, inter_token_seconds=inter_token,
        first_token_seconds=first_token, requests_per_second=rate,
        output_tokens_per_second=rate * workload.output_tokens, limit=limit, saturated=saturated,
    )


def _bisect(excess, high: float) -> float:
    """The root in [0, high] of an increasing function that is negative at 0, to a billionth of `high`."""
    low = 0.0
    for _ in range(BISECTION_STEPS):
        middle = (low + high) / 2
        if excess(middle) > 0:
            high = middle
        else:
            low = middle
    return (low + high) / 2


def at_concurrency(engine: Engine, workload: Workload, concurrency: float) -> LoadPoint:
    """Closed loop: `concurrency` requests in the replica at all times (the benchmarks' --max-concurrency)."""
    cap, cap_limit = admission_limit(engine, workload)
    running, limit = (concurrency, "load") if concurrency < cap else (cap, cap_limit)
    waiting = concurrency - running
    decode_steps = workload.output_tokens - 1
    if decode_steps == 0:
        return _point(engine, workload, 0.0, running, limit, saturated=False, waiting=waiting)

    def excess(decoding: float) -> float:
        # Little's law over one request: it decodes for decode_steps of its first token + decode_steps steps.
        point = _point(engine, workload, decoding, running, limit, saturated=False)
        decoding_time = decode_steps * point.inter_token_seconds
        return decoding - running * decoding_time / (point.first_token_seconds + decoding_time)

    decoding = _bisect(excess, running)
    return _point(engine, workload, decoding, running, limit, saturated=False, waiting=waiting)


def at_request_rate(engine: Engine, workload: Workload, requests_per_second: float) -> LoadPoint:
    """Open loop: requests arrive at a mean rate; at more than the replica carries, its full load, `saturated`."""
    cap, cap_limit = admission_limit(engine, workload)
    full = at_concurrency(engine, workload, cap)
    if requests_per_second >= full.requests_per_second:
        return replace(full, saturated=requests_per_second > full.requests_per_second)
    decode_steps = workload.output_tokens - 1
    if decode_steps == 0:   # prompts only: as many running as it takes to prefill the rate
        running = _bisect(
            lambda admitted: _point(engine, workload, 0.0, admitted, "load", False).requests_per_second
            - requests_per_second,
            full.running,
        )
        return _point(engine, workload, 0.0, running, "load", saturated=False)

    def state(decoding: float) -> LoadPoint:
        # Those admitted are the decoding ones plus those waiting for their first token (Little's law).
        first = _point(engine, workload, decoding, decoding, "load", saturated=False)
        running = requests_per_second * (first.first_token_seconds + decode_steps * first.inter_token_seconds)
        running = min(cap, max(decoding, running))
        return _point(engine, workload, decoding, running, "load" if running < cap else cap_limit, saturated=False)

    decoding = _bisect(lambda d: d - requests_per_second * decode_steps * state(d).inter_token_seconds, full.decoding)
    point = state(decoding)
    # Below saturation the replica carries exactly what is offered.
    return replace(
        point, requests_per_second=requests_per_second,
        output_tokens_per_second=requests_per_second * workload.output_tokens,
    )
