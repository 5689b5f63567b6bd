"""An OpenAI-protocol judge client: chat-completions requests with retries, backoff, a rate limit.

Retried (exponential backoff, backoff_s * 2**attempt capped at max_backoff_s): HTTP 5xx, 429
(after its Retry-After seconds where given, also capped), timeouts, dropped connections and
replies that are not a chat completion with message content. Not retried: other HTTP errors
(401, 404, 400: the same request gets the same answer) and a reply whose score is unparseable
or outside [0, 5] (requests are sent at temperature 0, so a retry would mostly repeat it and
only spend calls). Either way the item's Judgement has score None and the error; only a
connection that is refused or a host that is unreachable on every try raises JudgeUnreachable,
which stops the whole batch rather than fail every item of it.

The API key is read from the environment variable the endpoint names at request time, sent only
as `Authorization: Bearer`, and blanked out of every error text and log line.
"""

from __future__ import annotations

import errno
import http.client
import json
import logging
import os
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from mmspec.scoring.judge.templates import (
    MAX_TOKENS,
    TEMPLATES,
    BadReply,
    parse_score,
    vdc_answer_messages,
    vdc_score_messages,
    vdd_messages,
)

log = logging.getLogger(__name__)

LOOPBACK = ("127.0.0.1", "localhost", "::1")
UNREACHABLE_ERRNOS = {errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EADDRNOTAVAIL}


class JudgeError(RuntimeError):
    """A judge problem that stops the batch (not one item's failure)."""


class JudgeUnreachable(JudgeError):
    """The endpoint refused the connection, or its host was unreachable, on every try."""


class MissingApiKey(JudgeError):
    """The endpoint names an API key variable that is not set."""


@dataclass(frozen=True)
class JudgeEndpoint:
    """Where the judge is and how to talk to it. `api_key_env` names the variable holding the
    key (the key itself is never stored here, so it is in no repr or config dump)."""

    base_url: str  # e.g. http://127.0.0.1:8000/v1
    model: str
    api_key_env: str | None = None
    timeout_s: float = 30.0
    max_retries: int = 4  # retries after the first try
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    requests_per_s: float | None = None  # shared by all threads of one client

    def __post_init__(self):
        scheme = urllib.parse.urlsplit(self.base_url).scheme
        if scheme not in ("http", "https"):
            raise ValueError(
                f"judge endpoint {self.base_url!r} is not an http(s) URL "
                "(e.g. http://127.0.0.1:8000/v1)"
            )
        if self.timeout_s <= 0 or self.max_retries < 0 or self.backoff_s < 0:
            raise ValueError(
                f"judge endpoint {self.base_url}: timeout_s must be > 0, max_retries and "
                "backoff_s >= 0"
            )
        if self.requests_per_s is not None and self.requests_per_s <= 0:
            raise ValueError(f"judge endpoint {self.base_url}: requests_per_s must be > 0")

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"


@dataclass(frozen=True)
class JudgeItem:
    """One answer to judge. `qa` (vdc only, required there): (question, correct answer) pairs."""

    template: str
    question: str
    reference: str
    answer: str
    qa: tuple[tuple[str, str], ...] = ()

    def __post_init__(self):
        if self.template not in TEMPLATES:
            raise ValueError(f"unknown judge template {self.template!r}; known: {TEMPLATES}")
        qa = tuple(tuple(pair) for pair in self.qa)  # lists from JSON become hashable tuples
        if any(len(pair) != 2 or not all(isinstance(s, str) for s in pair) for pair in qa):
            raise ValueError("JudgeItem.qa must hold (question, correct answer) string pairs")
        if self.template == "vdc" and not qa:
            raise ValueError(
                "a vdc judge item needs its questions: qa=((question, correct answer), ...)"
            )
        object.__setattr__(self, "qa", qa)


@dataclass(frozen=True)
class Judgement:
    score: float | None  # 0-5; None when the judgement failed
    error: str | None
    calls: int  # HTTP requests made for it, retries included
    cached: bool


class JudgeFailed(Exception):
    """One request failed for good (after its retries, or at once if retrying cannot help)."""

    def __init__(self, what: str, tries: int):
        super().__init__(what)
        self.tries = tries


class _Retry(Exception):
    """A try that failed in a way another try may not."""

    def __init__(self, what: str, retry_after: float | None = None, unreachable: str = ""):
        super().__init__(what)
        self.retry_after = retry_after
        self.unreachable = unreachable  # how the endpoint is unreachable, if it is


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # urllib would resend the Authorization header to wherever a redirect points
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


class _RateLimit:
    """At most `per_s` request starts a second across all threads: each takes the next slot."""

    def __init__(self, per_s: float | None):
        self.gap = 1.0 / per_s if per_s else 0.0
        self.next = 0.0
        self.lock = threading.Lock()

    def wait(self) -> None:
        if not self.gap:
            return
        with self.lock:
            now = time.monotonic()
            at = max(now, self.next)
            self.next = at + self.gap
        time.sleep(max(0.0, at - now))


def _snippet(data: bytes | str, n: int = 200) -> str:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    text = " ".join(text.split())
    return text if len(text) <= n else text[:n] + "..."


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds; None if absent or an HTTP date (then plain backoff applies)."""
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _content(data: bytes) -> str:
    try:
        content = json.loads(data)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise _Retry(f"malformed reply, not a chat completion: {_snippet(data)!r}") from None
    if not isinstance(content, str) or not content.strip():
        raise _Retry("reply without message content")
    return content.strip()


class JudgeClient:
    """Judges items at one endpoint; `.calls` counts every HTTP request made (thread-safe)."""

    def __init__(self, endpoint: JudgeEndpoint):
        self.endpoint = endpoint
        self._calls = 0
        self._lock = threading.Lock()
        self._limit = _RateLimit(endpoint.requests_per_s)
        host = urllib.parse.urlsplit(endpoint.base_url).hostname
        # a cluster's http_proxy must not catch a judge on this machine (nor see its key)
        proxies = {} if host in LOOPBACK else None
        self._opener = urllib.request.build_opener(
            urllib.request.ProxyHandler(proxies), _NoRedirect
        )
        self._key()  # an unset key variable fails here, before any request

    @property
    def calls(self) -> int:
        with self._lock:
            return self._calls

    def _key(self) -> str | None:
        name = self.endpoint.api_key_env
        if name is None:
            return None
        key = os.environ.get(name)
        if not key:
            raise MissingApiKey(
                f"judge endpoint {self.endpoint.base_url}: the API key variable {name} "
                "(judge.api_key_env) is not set in the environment"
            )
        return key

    def _redact(self, text: str) -> str:
        """`text` with the API key blanked out (a server may echo what it was sent)."""
        name = self.endpoint.api_key_env
        key = os.environ.get(name) if name else None
        return text.replace(key, "[api key]") if key else text

    def _attempt(self, body: bytes) -> str:
        """One HTTP request; the reply's message content, or _Retry / JudgeFailed."""
        headers = {"Content-Type": "application/json", "User-Agent": "mmspec-judge"}
        if key := self._key():
            headers["Authorization"] = f"Bearer {key}"
        request = urllib.request.Request(self.endpoint.url, body, headers, method="POST")
        self._limit.wait()
        with self._lock:
            self._calls += 1
        try:
            with self._opener.open(request, timeout=self.endpoint.timeout_s) as reply:
                status, reply_headers, data = reply.status, reply.headers, reply.read()
        except urllib.error.HTTPError as err:  # before URLError: it is one
            status, reply_headers = err.code, err.headers
            try:
                data = err.read()
            except OSError:
                data = b""
            finally:
                err.close()
        except urllib.error.URLError as err:  # urllib wraps errors of connecting and sending
            raise self._network(err.reason, connecting=True) from None
        except (OSError, http.client.HTTPException) as err:  # TimeoutError is an OSError
            raise self._network(err, connecting=False) from None
        what = f"HTTP {status} from {self.endpoint.url}: {_snippet(data)!r}"
        if status == 429:
            raise _Retry(what, retry_after=_retry_after(reply_headers.get("Retry-After")))
        if status >= 500:
            raise _Retry(what)
        if not 200 <= status < 300:
            raise JudgeFailed(what, tries=0)
        return _content(data)

    def _network(self, reason, connecting: bool) -> Exception:
        """The _Retry (or JudgeFailed) for a request that got no HTTP reply."""
        timeout = self.endpoint.timeout_s
        if isinstance(reason, TimeoutError) and connecting:  # no host answers there
            return _Retry(f"connecting timed out ({timeout}s)", unreachable="was unreachable")
        if isinstance(reason, TimeoutError):  # the server is there, this request is slow
            return _Retry(f"no reply within timeout_s={timeout}")
        if isinstance(reason, ConnectionRefusedError):
            return _Retry("connection refused", unreachable="refused the connection")
        if isinstance(reason, socket.gaierror) or getattr(reason, "errno", None) in (
            UNREACHABLE_ERRNOS
        ):
            return _Retry(f"host unreachable ({reason})", unreachable="was unreachable")
        if isinstance(reason, OSError | http.client.HTTPException):
            return _Retry(f"connection failed ({type(reason).__name__}: {reason})")
        return JudgeFailed(f"request failed ({reason})", tries=0)

    def complete(self, messages: list[dict], max_tokens: int) -> tuple[str, int]:
        """The judge's reply to `messages` and the requests it took; raises JudgeFailed (with
        its .tries) or JudgeUnreachable."""
        end = self.endpoint
        body = json.dumps(
            {"model": end.model, "messages": messages, "temperature": 0, "max_tokens": max_tokens}
        ).encode()
        tries = end.max_retries + 1
        for attempt in range(tries):
            try:
                return self._attempt(body), attempt + 1
            except JudgeFailed as err:
                raise JudgeFailed(self._redact(str(err)), tries=attempt + 1) from None
            except _Retry as err:
                last = err
                if attempt + 1 == tries:
                    break
                wait = end.backoff_s * 2**attempt if err.retry_after is None else err.retry_after
                wait = min(wait, end.max_backoff_s)
                what = self._redact(str(err))
                log.info(
                    "judge %s: %s; retry %d/%d in %.2fs",
                    end.base_url,
                    what,
                    attempt + 1,
                    end.max_retries,
                    wait,
                )
                time.sleep(wait)
        if last.unreachable:
            raise JudgeUnreachable(
                self._redact(
                    f"judge endpoint {end.base_url} {last.unreachable} after {tries} tries "
                    f"({last}); is a judge server running there?"
                )
            )
        raise JudgeFailed(self._redact(f"{last} (gave up after {tries} tries)"), tries=tries)

    def judge(self, item: JudgeItem) -> Judgement:
        """The item's Judgement (score None with the error on failure); raises JudgeUnreachable
        or MissingApiKey, which no other item would get past either."""
        calls = 0
        step = ""
        try:
            if item.template == "vdd":
                reply, n = self.complete(
                    vdd_messages(item.question, item.reference, item.answer), MAX_TOKENS["vdd"]
                )
                calls += n
                return Judgement(parse_score(reply), None, calls, cached=False)
            scores = []
            for i, (question, reference) in enumerate(item.qa):
                step = f"question {i + 1} of {len(item.qa)}, "
                answered, n = self.complete(
                    vdc_answer_messages(item.answer, question), MAX_TOKENS["vdc_answer"]
                )
                calls += n
                reply, n = self.complete(
                    vdc_score_messages(question, reference, answered), MAX_TOKENS["vdc_score"]
                )
                calls += n
                scores.append(parse_score(reply))
            return Judgement(sum(scores) / len(scores), None, calls, cached=False)
        except JudgeFailed as err:
            error = f"{item.template} {step}{err}"
            return Judgement(None, error, calls + err.tries, cached=False)
        except BadReply as err:
            error = self._redact(f"{item.template} {step}{err}")
            return Judgement(None, error, calls, cached=False)
