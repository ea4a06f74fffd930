"""The rendered queue worker and batch-job scripts, run for real against local stand-ins on 127.0.0.1.

The worker talks RESP to a small in-test Redis (which, like a Redis with `requirepass`, answers NOAUTH
until a client sends AUTH with its password) and HTTP to a fake OpenAI endpoint; the batch stages run
under bash with `aws` replaced by a shim that maps s3:// URIs to a local folder.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socketserver
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from inferstack.serving.workers import REDIS_PASSWORD_ENV, render_batch_stage, render_worker
from inferstack.spec import BatchJobSpec, StackSpec

BASH = shutil.which("bash")
needs_gnu_tools = pytest.mark.skipif(
    not (BASH and shutil.which("split") and shutil.which("stat")), reason="needs bash, split and stat (coreutils)"
)


REDIS_PASSWORD = "queue-password-for-tests"


class FakeRedis(socketserver.ThreadingTCPServer):
    """AUTH, RPUSH and BLPOP over RESP, enough for the worker; BLPOP on an empty list answers nil after 0.1 s.

    Replies as Redis 7.4 does with `requirepass` set (redis/redis 7.4.1 src/server.c processCommand and
    src/acl.c): NOAUTH to any command but AUTH before it succeeds, WRONGPASS to a wrong password."""

    allow_reuse_address = True
    daemon_threads = True

    def __init__(self, lists: dict[str, list[bytes]], password: str = REDIS_PASSWORD) -> None:
        self.lists = lists
        self.password = password
        self.refused: list[str] = []  # commands answered NOAUTH or WRONGPASS
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), RespHandler)


class RespHandler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        authenticated = False
        while True:
            line = self.rfile.readline()
            if not line:
                return
            args = [self._bulk() for _ in range(int(line[1:]))]
            command, key = args[0].decode().upper(), args[1].decode()
            server: FakeRedis = self.server
            if command == "AUTH":
                authenticated = key == server.password
                if not authenticated:
                    server.refused.append(command)
                self.wfile.write(b"+OK\r\n" if authenticated else b"-WRONGPASS invalid username-password pair\r\n")
            elif not authenticated:
                server.refused.append(command)
                self.wfile.write(b"-NOAUTH Authentication required.\r\n")
            elif command == "RPUSH":
                with server.lock:
                    server.lists.setdefault(key, []).extend(args[2:])
                    size = len(server.lists[key])
                self.wfile.write(f":{size}\r\n".encode())
            elif command == "BLPOP":
                with server.lock:
                    items = server.lists.get(key) or []
                    value = items.pop(0) if items else None
                if value is None:
                    time.sleep(0.1)
                    self.wfile.write(b"*-1\r\n")
                else:
                    self.wfile.write(b"*2\r\n" + self._encode(key.encode()) + self._encode(value))
            else:
                self.wfile.write(f"-ERR unknown command {command}\r\n".encode())

    def _bulk(self) -> bytes:
        size = int(self.rfile.readline()[1:])
        return self.rfile.read(size + 2)[:-2]

    @staticmethod
    def _encode(data: bytes) -> bytes:
        return f"${len(data)}\r\n".encode() + data + b"\r\n"


class FakeModel(BaseHTTPRequestHandler):
    """An OpenAI-style endpoint: answers 503 once to prompts saying 'flaky', 400 to 'reject'."""

    calls: list[tuple[str, dict]] = []
    flaked: set[str] = set()

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeModel.calls.append((self.path, body))
        text = json.dumps(body)
        if "reject" in text:
            return self._answer(400, {"error": "bad request"})
        if "flaky" in text and text not in FakeModel.flaked:
            FakeModel.flaked.add(text)
            return self._answer(503, {"error": "loading"})
        self._answer(200, {"object": "chat.completion", "model": body["model"], "echo": body})

    def _answer(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


def serve(server) -> None:
    threading.Thread(target=server.serve_forever, daemon=True).start()


@pytest.fixture
def stack() -> StackSpec:
    return StackSpec.model_validate(
        {
            "environment": "test",
            "node_pools": [{"name": "l4", "instance_types": ["g6.xlarge"], "max_nodes": 1,
                            "capacity": {"on_demand_base": 1}}],
            "models": [{"name": "chat", "model": "Qwen/Qwen2.5-7B-Instruct-AWQ", "quantization": "awq", "pool": "l4"}],
            "workers": [{"name": "w", "model_service": "chat", "image": "python:3.13.1-slim", "list_name": "jobs"}],
        }
    )


def test_worker_serves_jobs_retries_transient_errors_and_stops_on_sigterm(stack, tmp_path):
    jobs = [
        {"id": "1", "body": {"messages": [{"role": "user", "content": "hello"}], "model": "ignored"}},
        {"id": "2", "path": "/v1/embeddings", "body": {"input": "text"}},
        {"id": "3", "body": {"messages": [{"role": "user", "content": "flaky"}]}},
        {"id": "4", "path": "/admin", "body": {}},
        {"id": "5", "body": {"messages": [{"role": "user", "content": "reject"}]}},
    ]
    redis = FakeRedis({"jobs": [json.dumps(j).encode() for j in jobs] + [b"not json"]})
    model = ThreadingHTTPServer(("127.0.0.1", 0), FakeModel)
    FakeModel.calls, FakeModel.flaked = [], set()
    serve(redis), serve(model)
    script = tmp_path / "worker.py"
    script.write_text(
        render_worker(stack, stack.workers[0], redis_host="127.0.0.1", redis_port=redis.server_address[1],
                      url=f"http://127.0.0.1:{model.server_address[1]}")
    )
    worker = subprocess.Popen([sys.executable, str(script)], stderr=subprocess.PIPE, text=True,
                              env={**os.environ, REDIS_PASSWORD_ENV: REDIS_PASSWORD})
    try:
        deadline = time.monotonic() + 15
        while len(redis.lists.get("jobs:results", [])) + len(redis.lists.get("jobs:failed", [])) < 6:
            assert time.monotonic() < deadline, "the worker did not finish the jobs"
            assert worker.poll() is None, worker.stderr.read()
            time.sleep(0.05)
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=5)
    finally:
        if worker.poll() is None:
            worker.kill()
        redis.shutdown(), model.shutdown()
    assert worker.returncode == 0 and "worker: stopped" in stderr
    assert redis.refused == []  # every command after AUTH with the password

    results = {r["id"]: r for r in map(json.loads, redis.lists["jobs:results"])}
    assert sorted(results) == ["1", "2", "3"]
    assert results["1"]["response"]["model"] == "chat"  # the served model, whatever the job said
    assert [path for path, _ in FakeModel.calls].count("/v1/embeddings") == 1
    assert sum(1 for _, body in FakeModel.calls if "flaky" in json.dumps(body)) == 2  # one retry
    failed = {f.get("id"): f for f in map(json.loads, redis.lists["jobs:failed"])}
    assert "is not one of" in failed["4"]["error"]
    assert failed["5"]["error"].startswith("HTTP 400")
    assert failed[None]["error"].startswith("not JSON") and failed[None]["job"] == "not json"
    assert sum(1 for _, body in FakeModel.calls if "reject" in json.dumps(body)) == 1  # 4xx is not retried


# ------------------------------------------------------------------------------------- batch stages


AWS_SHIM = """#!/usr/bin/env bash
# aws s3 cp [--no-progress] SRC DST, with s3://bucket/key mapped to $FAKE_S3/bucket/key
set -euo pipefail
[[ "$1 $2" == "s3 cp" ]] || { echo "unexpected: $*" >&2; exit 2; }
shift 2
[[ "$1" == "--no-progress" ]] && shift
map() { if [[ "$1" == s3://* ]]; then printf '%s/%s' "$FAKE_S3" "${1#s3://}"; else printf '%s' "$1"; fi; }
src=$(map "$1"); dst=$(map "$2")
mkdir -p "$(dirname "$dst")"
cp "$src" "$dst"
"""


@pytest.fixture
def batch(tmp_path):
    """A work dir, a fake S3 with a 7-line input, and `aws` on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "aws").write_text(AWS_SHIM)
    (bin_dir / "aws").chmod(0o755)
    s3 = tmp_path / "s3"
    (s3 / "inputs").mkdir(parents=True)
    (s3 / "inputs" / "input.jsonl").write_text("".join(f'{{"custom_id": "{i}"}}\n' for i in range(7)))
    work = tmp_path / "work"
    work.mkdir()
    job = BatchJobSpec(name="eval", model_service="chat", pool="l4", input="s3://inputs/input.jsonl", output="s3://outputs/results/", parallelism=3)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_S3": str(s3)}
    return job, work, s3, env


def run_stage(stage: str, job: BatchJobSpec, work: Path, env: dict, index: int, command: list[str] | None = None):
    script = render_batch_stage(stage, job, shlex.join(command or ["true"]), work_dir=str(work))
    return subprocess.run(
        [BASH, "-c", script], env={**env, "JOB_COMPLETION_INDEX": str(index)}, capture_output=True, text=True, timeout=20
    )


@needs_gnu_tools
def test_batch_shard_run_and_upload(batch):
    job, work, s3, env = batch
    fetched = run_stage("fetch", job, work, env, index=1)
    assert fetched.returncode == 0, fetched.stderr
    # Round-robin: index 1 of 3 takes lines 2 and 5 (1-based) of the input.
    assert (work / "input.jsonl").read_text() == '{"custom_id": "1"}\n{"custom_id": "4"}\n'
    assert not (work / "input-all.jsonl").exists()
    ran = run_stage("run", job, work, env, index=1, command=["cp", str(work / "input.jsonl"), str(work / "output.jsonl")])
    assert ran.returncode == 0 and (work / ".succeeded").exists(), ran.stderr
    uploaded = run_stage("upload", job, work, env, index=1)
    assert uploaded.returncode == 0, uploaded.stderr
    assert (s3 / "outputs" / "results" / "part-00001.jsonl").read_text() == (work / "input.jsonl").read_text()


@needs_gnu_tools
def test_batch_failure_uploads_nothing(batch):
    job, work, s3, env = batch
    assert run_stage("fetch", job, work, env, index=0).returncode == 0
    ran = run_stage("run", job, work, env, index=0, command=["false"])
    assert ran.returncode == 1 and (work / ".failed").exists()
    uploaded = run_stage("upload", job, work, env, index=0)
    assert uploaded.returncode == 1 and "failed; nothing uploaded" in uploaded.stdout
    assert not (s3 / "outputs").exists()


@needs_gnu_tools
def test_upload_gives_up_when_the_run_container_was_killed(batch):
    job, work, s3, env = batch
    heartbeat = work / ".heartbeat"
    heartbeat.touch()
    old = time.time() - 600
    os.utime(heartbeat, (old, old))
    uploaded = run_stage("upload", job, work, env, index=0)
    assert uploaded.returncode == 1 and "no heartbeat" in uploaded.stdout
    assert not (s3 / "outputs").exists()


@needs_gnu_tools
def test_an_empty_shard_succeeds_without_running_vllm(batch):
    job, work, s3, env = batch
    (s3 / "inputs" / "input.jsonl").write_text('{"custom_id": "only"}\n')
    assert run_stage("fetch", job, work, env, index=2).returncode == 0
    assert (work / "input.jsonl").read_text() == ""
    ran = run_stage("run", job, work, env, index=2, command=["false"])  # would fail if it ran
    assert ran.returncode == 0 and "empty shard" in ran.stdout
    assert run_stage("upload", job, work, env, index=2).returncode == 0
    assert (s3 / "outputs" / "results" / "part-00002.jsonl").read_text() == ""
