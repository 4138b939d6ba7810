"""Runs a Lambda function's `bootstrap` as a child process of LocalStack and serves it the Lambda Runtime API.

LocalStack's only built-in executor starts a Docker container; on a machine without a Docker engine every
function ends up `Failed`. This executor replaces both the container and the runtime-init binary: it starts the
bootstrap with LocalStack's environment for the function, answers `GET /runtime/invocation/next` with the event,
and turns `POST .../response` and `.../error` into LocalStack's `InvocationResult`. It keeps the process warm
between invocations, enforces the function timeout (killing the process group), reports init errors, and hands
the process's output to LocalStack, which stores it in CloudWatch Logs. Written against LocalStack 2026.3.0's
`RuntimeExecutor` interface; `tests/integration/lambda_executor.rs` fails loudly if that interface changes.
"""

import json
import logging
import os
import queue
import signal
import subprocess
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from localstack.services.lambda_.invocation.lambda_models import FunctionVersion, InvocationResult
from localstack.services.lambda_.invocation.plugins import RuntimeExecutorPlugin
from localstack.services.lambda_.invocation.runtime_executor import RuntimeExecutor

LOG = logging.getLogger(__name__)
RUNTIME = "/2018-06-01/runtime"
STARTUP_TIMEOUT_SECONDS = 20
PR_SET_PDEATHSIG = 1


class StartupError(Exception):
    pass


class _Invocation:
    def __init__(self, payload: dict):
        self.request_id = payload.get("invoke-id") or str(uuid.uuid4())
        self.arn = payload.get("invoked-function-arn", "")
        self.trace_id = payload.get("trace-id", "")
        self.body = (payload.get("payload") or "").encode()
        self.deadline_ms = 0
        self.done = threading.Event()
        self.result: InvocationResult | None = None


class _RuntimeApi(BaseHTTPRequestHandler):
    """The Lambda Runtime API for one executor. `self.server.executor` is the executor it serves."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        LOG.debug("runtime api %s: " + format, self.server.executor.id, *args)

    def _reply(self, status: int, body: bytes = b"", headers: dict | None = None):
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def do_GET(self):
        executor = self.server.executor
        if self.path != f"{RUNTIME}/invocation/next":
            return self._reply(404)
        executor._ready.set()
        invocation = executor._next_invocation()
        if invocation is None:
            return self._reply(410)
        self._reply(
            200,
            invocation.body,
            {
                "Content-Type": "application/json",
                "Lambda-Runtime-Aws-Request-Id": invocation.request_id,
                "Lambda-Runtime-Deadline-Ms": str(invocation.deadline_ms),
                "Lambda-Runtime-Invoked-Function-Arn": invocation.arn,
                "Lambda-Runtime-Trace-Id": invocation.trace_id,
            },
        )

    def do_POST(self):
        executor = self.server.executor
        body = self._body()
        parts = self.path[len(RUNTIME) :].strip("/").split("/")
        if parts == ["init", "error"]:
            executor._init_error = body or b'{"errorMessage":"init error"}'
            executor._ready.set()
            return self._reply(202)
        if len(parts) == 3 and parts[0] == "invocation" and parts[2] in ("response", "error"):
            executor._complete(parts[1], body, is_error=parts[2] == "error")
            return self._reply(202)
        return self._reply(404)


class ProcessRuntimeExecutor(RuntimeExecutor):
    def __init__(self, id: str, function_version: FunctionVersion) -> None:  # noqa: A002 - the interface's name
        super().__init__(id=id, function_version=function_version)
        self._server: ThreadingHTTPServer | None = None
        self._process: subprocess.Popen | None = None
        self._env: dict[str, str] = {}
        self._ready = threading.Event()
        self._init_error: bytes | None = None
        self._pending: queue.Queue = queue.Queue()
        self._current: _Invocation | None = None
        self._logs: list[str] = []
        self._logs_lock = threading.Lock()

    # --- the RuntimeExecutor interface -------------------------------------------------------------------

    def start(self, env_vars: dict[str, str]) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _RuntimeApi)
        self._server.daemon_threads = True
        self._server.executor = self
        threading.Thread(target=self._server.serve_forever, name=f"runtime-api-{self.id}", daemon=True).start()
        self._env = {k: str(v) for k, v in env_vars.items()}
        self._spawn()

    def stop(self) -> None:
        self._kill()
        self._pending.put(None)
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    def get_address(self) -> str:
        return "127.0.0.1"

    def get_endpoint_from_executor(self) -> str:
        return "127.0.0.1"

    def get_runtime_endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}" if self._server else ""

    def invoke(self, payload: dict[str, str]) -> InvocationResult:
        if self._process is None or self._process.poll() is not None:
            # Killed by a timeout (or crashed): a fresh process, as Lambda starts a new environment.
            self._spawn()
        timeout = float(self._env.get("AWS_LAMBDA_FUNCTION_TIMEOUT") or 3)
        invocation = _Invocation(payload)
        invocation.deadline_ms = int((time.time() + timeout) * 1000)
        with self._logs_lock:
            self._logs.clear()
        self._current = invocation
        self._pending.put(invocation)
        if invocation.done.wait(timeout):
            return invocation.result
        self._kill()
        message = f"Task timed out after {timeout:.2f} seconds"
        body = json.dumps({"errorType": "Sandbox.Timedout", "errorMessage": message}).encode()
        return InvocationResult(invocation.request_id, body, is_error=True, logs=self._drain_logs(message))

    def get_logs(self) -> str:
        with self._logs_lock:
            return "".join(self._logs)

    @classmethod
    def prepare_version(cls, function_version: FunctionVersion) -> None:
        if function_version.config.code:
            function_version.config.code.prepare_for_execution()

    @classmethod
    def cleanup_version(cls, function_version: FunctionVersion) -> None:
        pass

    @classmethod
    def validate_environment(cls) -> bool:
        return True

    # --- the process -----------------------------------------------------------------------------------

    def _spawn(self) -> None:
        code = self.function_version.config.code
        task_root = str(code.get_unzipped_code_location()) if code else ""
        bootstrap = os.path.join(task_root, "bootstrap")
        if not os.path.isfile(bootstrap):
            raise StartupError(f"no bootstrap in the function's code ({task_root})")
        os.chmod(bootstrap, 0o755)
        env = dict(self._env)
        env.update(
            {
                "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{self._server.server_address[1]}",
                "LAMBDA_TASK_ROOT": task_root,
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            }
        )
        self._ready.clear()
        self._init_error = None
        # A fresh queue per process: a request handler of a killed process may still wait on the old one.
        self._pending.put(None)
        self._pending = queue.Queue()
        self._process = subprocess.Popen(
            [bootstrap],
            cwd=task_root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        threading.Thread(target=self._collect_output, args=(self._process,), daemon=True).start()
        deadline = time.time() + STARTUP_TIMEOUT_SECONDS
        while not self._ready.wait(0.05):
            if self._process.poll() is not None:
                raise StartupError(f"bootstrap exited with {self._process.returncode} during init: {self.get_logs()}")
            if time.time() > deadline:
                self._kill()
                raise StartupError(f"bootstrap did not ask for an invocation within {STARTUP_TIMEOUT_SECONDS}s")
        if self._init_error is not None:
            self._kill()
            raise StartupError(f"init error: {self._init_error.decode(errors='replace')}")

    def _collect_output(self, process: subprocess.Popen) -> None:
        for line in iter(process.stdout.readline, b""):
            with self._logs_lock:
                self._logs.append(line.decode(errors="replace"))

    def _next_invocation(self) -> "_Invocation | None":
        pending = self._pending
        return pending.get()

    def _complete(self, request_id: str, body: bytes, is_error: bool) -> None:
        invocation = self._current
        if invocation is None or invocation.request_id != request_id:
            LOG.warning("executor %s: answer for unknown request %s", self.id, request_id)
            return
        # Give the output thread a moment to read what the handler printed before answering.
        time.sleep(0.05)
        invocation.result = InvocationResult(request_id, body, is_error=is_error, logs=self._drain_logs())
        invocation.done.set()

    def _drain_logs(self, extra: str = "") -> str:
        with self._logs_lock:
            logs = "".join(self._logs) + (extra + "\n" if extra else "")
            self._logs.clear()
        return logs

    def _kill(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=5)


def _die_with_parent() -> None:
    """In the child: SIGKILL when LocalStack dies, so no function process outlives it."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


class ProcessRuntimeExecutorPlugin(RuntimeExecutorPlugin):
    name = "process"

    def load(self, *args, **kwargs):
        return ProcessRuntimeExecutor
