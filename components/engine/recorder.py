"""The embedded engine: run the Pulumi program in-process under Pulumi's mock runtime and record
every registration exactly as a real engine would receive it (type, name, parent, inputs, deps),
and every output the program read that the mocks left unanswered.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import CodeType
from typing import Any, Callable

import pulumi
from pulumi import Archive, Asset, CustomResource, Output
from pulumi import _types as pulumi_types
from pulumi.runtime import rpc
from pulumi.runtime.mocks import MockMonitor, Mocks, set_mocks
from pulumi.runtime.settings import ROOT
from pulumi.runtime.stack import run_in_stack
from pulumi.runtime.sync_await import _sync_await

PROJECT = "inferstack"
SECRET_SIG = rpc._special_secret_sig  # the wire marker of a secret value: {SIG_KEY: SECRET_SIG, "value": v}
SIG_KEY = rpc._special_sig_key
# While the program runs, the cyclic GC collects young objects every this many allocations (default
# 700) and leaves full collections until the run is over; see rare_collections.
YOUNG_COLLECTION_ALLOCATIONS = 100_000
# A generated invoke function copies every field of the engine's answer (its parameter `__response__`)
# into the result it returns; those copies are the SDK's reads, not the program's.
INVOKE_RESPONSE = "__response__"


@dataclass
class Registration:
    type: str
    name: str
    custom: bool
    parent: str | None
    inputs: dict[str, Any]
    depends_on: list[str]
    options: dict[str, Any] = field(default_factory=dict)  # the resource options the request set (see `options_of`)
    # Not in resources.json (as_dict keeps its seven keys); the time-to-serving graph reads them.
    provider: str | None = None                 # the provider resource it is created through
    input_dependencies: list[str] = field(default_factory=list)  # the part of depends_on its inputs imply
    urn: str = ""                               # what Pulumi identifies it by

    @property
    def logical_name(self) -> str:
        """The name the program gave it (`name` adds the URN's qualified type when another resource shares it)."""
        return self.urn.rsplit("::", 1)[-1] if self.urn else self.name

    def as_dict(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "name": self.name,
            "custom": self.custom,
            "parent": self.parent,
            "inputs": self.inputs,
            "depends_on": self.depends_on,
            "options": self.options,
        }


@dataclass
class Recording:
    """What one run of the program registered, in registration order, plus the stack's outputs."""

    stack: str
    resources: list[Registration] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    # Outputs the program read that the mock engine left without a value, e.g.
    # "aws:ec2/eip:Eip dev-network-nat-us-east-1a-eip .allocation_id"; a real engine would have answered them.
    unanswered: list[str] = field(default_factory=list)

    def of_type(self, type_token: str) -> list[Registration]:
        return [r for r in self.resources if r.type == type_token]

    def named(self, name: str) -> Registration:
        return next(r for r in self.resources if r.name == name)


def plain(value: Any) -> Any:
    """Wire values -> JSON. Secrets keep Pulumi's own wire marker ({SIG_KEY: SECRET_SIG, "value": v}),
    exactly as the engine (and a policy analyzer) receives them."""
    if isinstance(value, (Asset, Archive)):
        return {"asset": getattr(value, "path", None) or getattr(value, "uri", None) or getattr(value, "text", None)}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


class RecordingMonitor(MockMonitor):
    """A MockMonitor that keeps what each RegisterResource request carried."""

    def __init__(self, mocks: Mocks, recording: Recording) -> None:
        super().__init__(mocks)
        self.recording = recording
        self._names: dict[str, str] = {}
        self._taken: set[str] = set()
        self._stack_urn = ""
        self._lock = threading.Lock()

    def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
        response = super().RegisterResource(request)
        if request.type == "pulumi:pulumi:Stack":
            self._stack_urn = response.urn
            return response
        inputs = rpc.deserialize_properties(request.object, keep_unknowns=True, keep_internal=False)  # secrets stay marked
        with self._lock:
            name = self._unique_name(request.name, response.urn)
            self._names[response.urn] = name
            implied = {urn for deps in request.propertyDependencies.values() for urn in deps.urns}
            self.recording.resources.append(
                Registration(
                    type=request.type,
                    name=name,
                    custom=bool(request.custom),
                    parent=self._names.get(request.parent),
                    inputs=plain(inputs),
                    depends_on=sorted({self._names[urn] for urn in request.dependencies if urn in self._names}),
                    options=options_of(request),
                    provider=self._names.get(request.provider.rpartition("::")[0]) if request.provider else None,
                    input_dependencies=sorted({self._names[urn] for urn in implied if urn in self._names}),
                    urn=response.urn,
                )
            )
        return response

    def _unique_name(self, name: str, urn: str) -> str:
        """The name, or, when an earlier resource has it too, the name with the URN's qualified type, so
        that references recorded during the run stay unambiguous (see `_qualify_shared_names`)."""
        if name not in self._taken:
            self._taken.add(name)
            return name
        qualified = _qualified(name, urn)
        self._taken.add(qualified)
        return qualified

    def RegisterResourceOutputs(self, request):  # noqa: N802
        if request.urn == self._stack_urn:
            self.recording.outputs = plain(rpc.deserialize_properties(request.outputs, keep_internal=False))
        return super().RegisterResourceOutputs(request)


def options_of(request: Any) -> dict[str, Any]:
    """The lifecycle options a RegisterResourceRequest carries (pulumi's proto/pulumi/resource.proto), only
    those the program set: `protect` and `retainOnDelete` are optional fields, so an explicit false shows
    (a stack that may be torn down) apart from unset (inherited, false at the root)."""
    options: dict[str, Any] = {}
    if request.HasField("protect"):
        options["protect"] = request.protect
    if request.HasField("retainOnDelete"):
        options["retain_on_delete"] = request.retainOnDelete
    if request.deleteBeforeReplaceDefined:
        options["delete_before_replace"] = request.deleteBeforeReplace
    if request.replaceOnChanges:
        options["replace_on_changes"] = list(request.replaceOnChanges)
    if request.ignoreChanges:
        options["ignore_changes"] = list(request.ignoreChanges)
    if request.HasField("customTimeouts"):
        timeouts = {
            key: getattr(request.customTimeouts, key)
            for key in ("create", "update", "delete", "read")
            if getattr(request.customTimeouts, key)
        }
        if timeouts:
            options["custom_timeouts"] = timeouts
    return options


def record(program: Callable[[], None], stack: str, mocks: Mocks) -> Recording:
    """Run `program` as the Pulumi language host would (inside a Stack), against the mock engine."""
    recording = Recording(stack=stack)
    monitor = RecordingMonitor(mocks, recording)
    ROOT.set(None)
    set_mocks(mocks, project=PROJECT, stack=stack, preview=False, monitor=monitor)
    ROOT.set(None)  # set_mocks made a root Stack; run_in_stack makes the real one, as `pulumi up` does
    with _program_order() as order, _reads() as reads, _without_source_positions(), rare_collections():
        try:
            _sync_await(run_in_stack(program))
        except BaseException:
            _cancel_leftover_tasks()
            raise
    recording.unanswered = reads.unanswered()
    # Requests reach the engine as their inputs resolve, which varies run to run; list them in the
    # order the program registered them, so resources.json is the same for the same program.
    # Resources sharing a type and name (children of components of different types) fall back on the URN.
    recording.resources.sort(key=lambda r: (order.get((r.type, r.logical_name), len(order)), r.urn))
    _qualify_shared_names(recording)
    return recording


def _qualified(name: str, urn: str) -> str:
    """The name with the URN's qualified type (parent type $ type), as unique as the URN itself."""
    return f"{name} ({urn.split('::')[2]})"


def _qualify_shared_names(recording: Recording) -> None:
    """Pulumi tells resources apart by URN, whose qualified type includes the parent's type, so two
    components of different types may each have a child named `x-deployment` (a model service and a worker
    both named `x`). Every resource whose name another shares is named with its qualified type, whatever
    order the engine saw them in, and every reference follows."""
    counts = Counter(r.logical_name for r in recording.resources)
    final = {
        r.name: r.logical_name if counts[r.logical_name] == 1 else _qualified(r.logical_name, r.urn)
        for r in recording.resources
    }
    if all(old == new for old, new in final.items()):
        return
    for r in recording.resources:
        r.name = final[r.name]
        r.parent = final.get(r.parent, r.parent) if r.parent else r.parent
        r.provider = final.get(r.provider, r.provider) if r.provider else r.provider
        r.depends_on = sorted(final.get(d, d) for d in r.depends_on)
        r.input_dependencies = sorted(final.get(d, d) for d in r.input_dependencies)


def _cancel_leftover_tasks() -> None:
    """A failed program can leave resolutions pending on the loop; cancel them so the next run starts clean."""
    loop = asyncio.get_event_loop()
    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))


@contextmanager
def _program_order():
    """Note the order in which the program constructs resources (the SDK's register_resource call)."""
    import pulumi.resource as sdk_resource

    order: dict[tuple[str, str], int] = {}
    original = sdk_resource.register_resource

    def noting(res, t, name, *args, **kwargs):
        order.setdefault((t, name), len(order))
        return original(res, t, name, *args, **kwargs)

    sdk_resource.register_resource = noting
    try:
        yield order
    finally:
        sdk_resource.register_resource = original


class _ReadLog:
    """Every output property the program read: resource outputs (still pending when read) and the fields
    of values already resolved (nested output types, invoke results), which are plain by then."""

    def __init__(self) -> None:
        self.pending: list[tuple[str, Output]] = []
        self.missing: set[str] = set()

    def note(self, owner: Any, name: str, value: Any, reader: CodeType) -> None:
        if isinstance(owner, CustomResource):
            if isinstance(value, Output):
                self.pending.append((f"{owner._type} {owner._name} .{name}", value))
        elif value is None and pulumi_types.is_output_type(type(owner)) and INVOKE_RESPONSE not in reader.co_varnames:
            self.missing.add(f"{type(owner).__name__} .{name}")

    def unanswered(self) -> list[str]:
        found = set(self.missing)
        for label, output in self.pending:
            data = output._data  # done once the run is over, unless the engine never resolved it
            resolved = data.done() and not data.cancelled() and data.exception() is None
            if not resolved or data.result().value is None or not data.result().is_known:
                found.add(label)
        return sorted(found)


@contextmanager
def _reads():
    """Log the program's reads of output properties (generated SDKs read every one through `pulumi.get`),
    so outputs a mock forgot to answer show up instead of silently resolving to None."""
    log = _ReadLog()
    original = pulumi.get

    def reading(owner: Any, name: str) -> Any:
        value = original(owner, name)
        log.note(owner, name, value, sys._getframe(1).f_code)
        return value

    pulumi.get = reading
    try:
        yield log
    finally:
        pulumi.get = original


@contextmanager
def _without_source_positions():
    """Skip the stack trace the SDK takes at every registration for the request's source position:
    the mock engine and the recording ignore it, and it walks every frame of the program's stack."""
    import pulumi.runtime.resource as sdk_runtime
    from pulumi.runtime.proto import source_pb2

    original = sdk_runtime._get_stack_trace
    sdk_runtime._get_stack_trace = source_pb2.StackTrace  # an empty trace: no source position
    try:
        yield
    finally:
        sdk_runtime._get_stack_trace = original


@contextmanager
def rare_collections():
    """A run keeps ~100 objects per resource (outputs, futures, tasks) alive until it ends; with the
    default thresholds the cyclic GC rescans that growing heap over and over, a third of a large
    run. Reference counting still frees what dies; cycles wait for the rarer passes. (The policy
    runner, which builds as many objects over the recording, uses it too.)"""
    thresholds = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_ALLOCATIONS, 100, 100)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
