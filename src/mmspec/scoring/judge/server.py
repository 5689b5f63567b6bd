"""mmspec's embedded judge: an OpenAI-protocol HTTP server that answers the lmms-eval judge
prompts with an exact rubric (the one a dataset source declares: the toy world's; or any
grader), plus scripted faults for tests.

It reads each request back with the templates (which stage; question, correct answer, answer)
and answers as the lmms-eval judge would: a dict string with the integer score
floor(5 * grader(answer, reference) + 0.5) for a VDD or VDC stage-2 request, and for a VDC
stage-1 request the question answered from the caption by `answerer`.

Standalone: `python -m mmspec.scoring.judge.server --port 8000` serves until interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from mmspec.data import source as dataset_source
from mmspec.scoring.judge.templates import read_messages

log = logging.getLogger(__name__)

MODEL = "mmspec-embedded-judge"
FAULTS = ("500", "429:<seconds>", "timeout:<seconds>", "malformed", "bad_score")


def _check_fault(fault: str) -> str:
    kind, _, seconds = fault.partition(":")
    ok = fault in ("500", "malformed", "bad_score")
    if kind in ("429", "timeout") and seconds:
        try:
            ok = float(seconds) >= 0
        except ValueError:
            ok = False
    if not ok:
        raise ValueError(f"unknown judge fault {fault!r}; known: {FAULTS}")
    return fault


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        log.debug("embedded judge: " + format, *args)  # not on stderr, as http.server would

    def _send(self, status: int, body: bytes, headers: dict | None = None) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout fault): nothing to answer

    def _error(self, status: int, message: str, headers: dict | None = None) -> None:
        error = {"message": message, "type": "mmspec_embedded_judge", "code": status}
        self._send(status, json.dumps({"error": error}).encode(), headers)

    def _authorised(self) -> bool:
        key = self.server.judge.api_key
        if key is None or self.headers.get("Authorization") == f"Bearer {key}":
            return True
        self._error(401, "missing or wrong API key (Authorization: Bearer ...)")
        return False

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.path.rstrip("/") != "/v1/models":
            return self._error(404, f"no such path {self.path}")
        if self._authorised():
            model = {"id": MODEL, "object": "model", "created": 0, "owned_by": "mmspec"}
            self._send(200, json.dumps({"object": "list", "data": [model]}).encode())

    def do_POST(self):  # noqa: N802
        size = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(size)
        if self.path.rstrip("/") != "/v1/chat/completions":
            return self._error(404, f"no such path {self.path}")
        judge = self.server.judge
        fault = judge._received()
        if fault == "500":
            return self._error(500, "scripted fault: internal error")
        if fault is not None and fault.startswith("429:"):
            return self._error(429, "scripted fault: rate limited", {"Retry-After": fault[4:]})
        if fault == "malformed":
            return self._send(200, b"<html>scripted fault: not JSON")
        if fault is not None and fault.startswith("timeout:"):
            time.sleep(float(fault.partition(":")[2]))  # then answer, to a client long gone
        if not self._authorised():
            return
        try:
            request = json.loads(body)
            read = read_messages(request["messages"])
        except (ValueError, KeyError, TypeError, AttributeError):
            return self._error(400, "not a chat-completions request")
        if read is None:
            return self._error(400, "the messages are none of the judge templates (vdd, vdc)")
        content = "{'score': 9}" if fault == "bad_score" else judge.reply(*read)
        message = {"role": "assistant", "content": content}
        completion = {
            "id": f"chatcmpl-{judge.requests}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model", MODEL),
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }
        self._send(200, json.dumps(completion).encode())


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a timeout fault's sleeping handler must not hold up exit
    judge: EmbeddedJudge

    def handle_error(self, request, client_address):
        log.exception("embedded judge: error answering %s", client_address)


class EmbeddedJudge:
    """A judge server on `host`:`port` (0: any free port) in a daemon thread, as a context
    manager. `faults` are answered one per chat request, in order, before normal answers:
    "500", "429:<seconds>" (with Retry-After), "timeout:<seconds>" (sleeps, then answers),
    "malformed" (a 200 that is not JSON), "bad_score" (a 200 whose score is 9). With `api_key`
    set, requests without `Authorization: Bearer <api_key>` get 401. `grader` and `answerer`
    default to the exact rubric a dataset source declares (`data.source.rubric`)."""

    def __init__(
        self,
        grader: Callable[[str, str], float] | None = None,
        faults: Iterable[str] | None = None,
        api_key: str | None = None,
        *,
        answerer: Callable[[str, str], str] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ):
        if grader is None or answerer is None:
            declared = dataset_source.rubric()
            if declared is None:
                raise ValueError("no dataset source declares an exact rubric: give a grader")
            rubric = importlib.import_module(declared)
            grader, answerer = grader or rubric.grade, answerer or rubric.answer
        self.grader, self.answerer, self.api_key = grader, answerer, api_key
        self.faults = [_check_fault(f) for f in faults or ()]
        self.host, self.port = host, port
        self._requests = 0
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:  # the dataclass-like default would show api_key
        return f"EmbeddedJudge(base_url={self.base_url!r})"

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def requests(self) -> int:
        """Chat requests received so far (faulted, refused and answered alike)."""
        with self._lock:
            return self._requests

    def _received(self) -> str | None:
        """Count a chat request; the fault it gets, if any is left."""
        with self._lock:
            self._requests += 1
            return self.faults.pop(0) if self.faults else None

    def reply(self, stage: str, fields: dict[str, str]) -> str:
        """What the lmms-eval judge is asked to reply to a request of `stage`."""
        if stage == "vdc_answer":
            return self.answerer(fields["caption"], fields["question"])
        grade = self.grader(fields["answer"], fields["reference"])
        score = min(5, max(0, math.floor(5 * grade + 0.5)))  # half up, not round()'s half even
        if stage == "vdc_score":
            return str({"pred": "yes" if score >= 3 else "no", "score": score})
        return str({"score": score})

    def start(self) -> EmbeddedJudge:
        self._server = _Server((self.host, self.port), _Handler)
        self._server.judge = self
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"embedded-judge-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()
            self._server = self._thread = None

    def __enter__(self) -> EmbeddedJudge:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--api-key-env",
        default=None,
        help="require the key held by this environment variable (never pass a key as an argument)",
    )
    args = parser.parse_args(argv)
    key = None
    if args.api_key_env:
        key = os.environ.get(args.api_key_env)
        if not key:
            parser.error(f"the API key variable {args.api_key_env} is not set")
    with EmbeddedJudge(api_key=key, host=args.host, port=args.port) as judge:
        print(f"embedded judge ({MODEL}) at {judge.base_url}; Ctrl-C stops it", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
