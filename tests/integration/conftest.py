"""Shared fixtures for integration tests against the real llama-server (llama.cpp b11434, CPU).

Fixtures
    llama_prefix      the build prefix (bin/, lib/); fails, never skips, when it is missing
    lab_models        {name: manifest entry} of tests/lab/gen_models.py, generated once per
                      session into $DANKFLEET_CACHE/models (re-runs reuse unchanged files)
    llama_server      factory: `with llama_server(model, *args) as srv:` starts llama-server on
                      a free 127.0.0.1 port, waits for /health 200, and stops it on exit;
                      srv.base_url, srv.log_path, srv.get_json(), srv.post_json(), srv.metrics()
    free_port         callable returning a free TCP port on 127.0.0.1 in the tests' range

The server's stdout+stderr go to srv.log_path (under pytest's tmp dir); a failure to start
quotes the log's tail, so the cause is in the test report.
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

import gen_models

REPO = Path(__file__).resolve().parents[2]

BUILD_NAME = "llama-b11434-cpu-rpc"
PORT_RANGE = range(18000, 18100)  # integration tests' range (docs/DEVELOPING.md)
HEALTH_TIMEOUT_S = float(os.environ.get("DANKFLEET_HEALTH_TIMEOUT", "120"))


def dankfleet_cache() -> Path:
    return Path(os.environ.get("DANKFLEET_CACHE") or Path.home() / ".cache" / "dankfleet")


def llama_prefix_path() -> Path:
    env = os.environ.get("DANKFLEET_LLAMA_PREFIX")
    return Path(env) if env else dankfleet_cache() / BUILD_NAME


@pytest.fixture(scope="session")
def llama_prefix() -> Path:
    prefix = llama_prefix_path()
    server = prefix / "bin" / "llama-server"
    if not os.access(server, os.X_OK):
        pytest.fail(f"llama-server not found at {server}: run `make llama-server` (tests/lab/build-llama-server.sh) "
                    "or point DANKFLEET_LLAMA_PREFIX at a b11434 build prefix", pytrace=False)
    return prefix


@pytest.fixture(scope="session")
def lab_models() -> dict:
    """Manifest of the small lab models, generated into $DANKFLEET_CACHE/models once per session."""
    return gen_models.generate(dankfleet_cache() / "models", scale="small")


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def find_free_port(exclude=()) -> int:
    ports = list(PORT_RANGE)
    start = random.SystemRandom().randrange(len(ports))
    for port in ports[start:] + ports[:start]:
        if port not in exclude and _port_is_free(port):
            return port
    raise RuntimeError(f"no free port in {PORT_RANGE.start}-{PORT_RANGE.stop - 1} on 127.0.0.1")


@pytest.fixture
def free_port():
    return find_free_port


def _request(url: str, payload=None, timeout: float = 60.0):
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status, resp.read().decode()


def parse_metrics(text: str) -> dict:
    """Prometheus text -> {series: value} (labels kept in the key, comments dropped)."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        with contextlib.suppress(ValueError):
            out[name] = float(value)
    return out


@dataclass
class LlamaServer:
    base_url: str
    port: int
    log_path: Path
    proc: subprocess.Popen
    argv: list

    def get_json(self, path: str, timeout: float = 60.0):
        _, body = _request(self.base_url + path, timeout=timeout)
        return json.loads(body)

    def post_json(self, path: str, payload: dict, timeout: float = 120.0):
        try:
            _, body = _request(self.base_url + path, payload, timeout=timeout)
        except urllib.error.HTTPError as e:
            raise AssertionError(f"POST {path} -> HTTP {e.code}: {e.read().decode(errors='replace')}\n"
                                 f"server log tail:\n{self.log_tail()}") from None
        return json.loads(body)

    def metrics(self) -> dict:
        _, body = _request(self.base_url + "/metrics")
        return parse_metrics(body)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=15)


@contextlib.contextmanager
def start_llama_server(prefix: Path, model, *args, log_dir: Path, ctx_size: int = 1024, threads: int = 2,
                       timeout: float = HEALTH_TIMEOUT_S):
    """Start llama-server on 127.0.0.1 with `model` and extra `args`; yield a LlamaServer once
    /health answers 200; stop it (SIGTERM, then SIGKILL) on exit."""
    model = Path(model)
    binary = prefix / "bin" / "llama-server"
    log_dir.mkdir(parents=True, exist_ok=True)
    tried = set()
    for attempt in range(3):  # another test may grab the port between our probe and the server's bind
        port = find_free_port(exclude=tried)
        tried.add(port)
        log_path = log_dir / f"llama-server-{model.stem}-{port}.log"
        argv = [str(binary), "--host", "127.0.0.1", "--port", str(port), "-m", str(model),
                "-c", str(ctx_size), "-t", str(threads), "--no-webui", *map(str, args)]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        srv = LlamaServer(f"http://127.0.0.1:{port}", port, log_path, proc, argv)
        try:
            deadline = time.monotonic() + timeout
            while True:
                if proc.poll() is not None:
                    text = srv.log_text()
                    if "couldn't bind" in text or "Address already in use" in text:
                        break  # retry on another port
                    raise AssertionError(f"llama-server exited with {proc.returncode} before /health answered\n"
                                         f"argv: {' '.join(argv)}\nlog tail ({log_path}):\n{srv.log_tail()}")
                with contextlib.suppress(OSError, urllib.error.URLError):
                    status, _ = _request(srv.base_url + "/health", timeout=2)
                    if status == 200:
                        yield srv
                        return
                if time.monotonic() > deadline:
                    raise AssertionError(f"llama-server did not answer /health 200 within {timeout:.0f} s\n"
                                         f"argv: {' '.join(argv)}\nlog tail ({log_path}):\n{srv.log_tail()}")
                time.sleep(0.1)
        finally:
            _stop(proc)
    raise AssertionError(f"llama-server could not bind any of ports {sorted(tried)}")


@pytest.fixture
def llama_server(llama_prefix, tmp_path):
    """`with llama_server(model, *args, ctx_size=1024) as srv:` - see start_llama_server."""
    def factory(model, *args, **kwargs):
        return start_llama_server(llama_prefix, model, *args, log_dir=tmp_path, **kwargs)
    return factory
