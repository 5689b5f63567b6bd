"""The LLM judge against a real embedded judge server on 127.0.0.1: templates, retries and
faults, the shared cache, API-key secrecy, refused connections, concurrency. The cache's own
guarantees under concurrent processes are in test_judge_cache.py."""

from __future__ import annotations

import json
import logging
import re
import secrets
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from mmspec.scoring.judge import (
    TEMPLATE_VERSION,
    TEMPLATES,
    BadReply,
    EmbeddedJudge,
    JudgeCache,
    JudgeClient,
    JudgeEndpoint,
    JudgeItem,
    JudgeUnreachable,
    MissingApiKey,
    cache_key,
    compact,
    judge_items,
    parse_score,
    templates,
)
from mmspec.scoring.judge.server import MODEL
from mmspec.toy.judge_rubric import answer as toy_answer
from mmspec.toy.judge_rubric import grade as toy_grade
from mmspec.toy.quality import score_toy

KEY_VAR = "MMSPEC_TEST_JUDGE_KEY"
QUESTION = "describe the video in detail ."
RED = "the red circle moves from the top left to the bottom right ."
BLUE = "the blue square moves from the top right to the bottom left ."
REFERENCE = f"i see two shapes . {RED} then {BLUE} that is all ."
HALF = "the red circle moves from the top left to the bottom right . the blue square stays at the top right ."  # noqa: E501
QA = (("where does the red circle go ?", RED), ("where does the blue square go ?", BLUE))


def endpoint(judge: EmbeddedJudge, **options) -> JudgeEndpoint:
    """An endpoint at `judge` with test-sized timeouts and backoffs."""
    settings = dict(timeout_s=2.0, max_retries=3, backoff_s=0.01, max_backoff_s=0.05)
    return JudgeEndpoint(judge.base_url, "toy-judge", **{**settings, **options})


def vdd(answer: str, reference: str = REFERENCE) -> JudgeItem:
    return JudgeItem("vdd", QUESTION, reference, answer)


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cache_rows(cache: JudgeCache) -> list[dict]:
    """Every row stored in the cache's shards."""
    return cache.rows().to_pylist()


# ---------------------------------------------------------------------------------------------
# templates


def test_templates_render_and_read_back():
    assert TEMPLATES == ("vdd", "vdc") and set(TEMPLATE_VERSION) == set(TEMPLATES)
    messages = templates.vdd_messages("q {x}\nline", "the ref", "Predicted Answer: odd")
    assert [m["role"] for m in messages] == ["system", "user"]
    assert (
        "Correct Answer: the ref\nPredicted Answer: Predicted Answer: odd\n\n"
        in (messages[1]["content"])
    )
    assert messages[1]["content"].endswith("{'score': 4.8}.")  # literal braces survive format
    assert templates.read_messages(messages) == (
        "vdd",
        {"question": "q {x}\nline", "reference": "the ref", "answer": "Predicted Answer: odd"},
    )
    stage1 = templates.vdc_answer_messages("a caption", "what ?")
    assert templates.read_messages(stage1) == (
        "vdc_answer",
        {"caption": "a caption", "question": "what ?"},
    )
    stage2 = templates.vdc_score_messages("what ?", "ref", "pred")
    assert templates.read_messages(stage2)[0] == "vdc_score"
    assert templates.read_messages([{"role": "user", "content": "hello"}]) is None


@pytest.mark.parametrize(
    "reply, score",
    [
        ("{'score': 4}", 4.0),
        ("{'pred': 'yes', 'score': 4.8}", 4.8),
        ("Here you go: {'pred': 'no', 'score': 0} ", 0.0),
        ('{"score": "5"}', 5.0),
    ],
)
def test_parse_score_reads_lmms_eval_replies(reply, score):
    assert parse_score(reply) == score


@pytest.mark.parametrize(
    "reply, says",
    [
        ("{'score': 9}", "outside the range [0, 5]"),
        ("{'score': -1}", "outside the range [0, 5]"),
        ("no dict here", "no {...} dict"),
        ("{'pred': 'yes'}", "no 'score' key"),
        ("{'score': 'high'}", "not a number"),
        ("{'score': True}", "not a number"),
        ("{'score': 4", "no {...} dict"),
        ("{'score': foo}", "not a Python dict literal"),
    ],
)
def test_parse_score_rejects_bad_replies_instead_of_scoring_zero(reply, says):
    with pytest.raises(BadReply, match=re.escape(says)):
        parse_score(reply)


def test_items_are_validated():
    with pytest.raises(ValueError, match="needs its questions"):
        JudgeItem("vdc", QUESTION, REFERENCE, HALF)
    with pytest.raises(ValueError, match="unknown judge template"):
        JudgeItem("mmmu", QUESTION, REFERENCE, HALF)
    assert JudgeItem("vdc", QUESTION, REFERENCE, HALF, qa=[list(p) for p in QA]).qa == QA


def test_toy_grade_and_answer():
    assert toy_grade(REFERENCE, REFERENCE) == 1.0
    assert toy_grade(HALF, REFERENCE) == 0.75  # red fully right, blue: 1 of its 2 stops
    assert toy_grade("a red circle at the top left .", "a red circle at the top left .") == 1.0
    assert toy_grade("four", "a square has four sides .") == 0.0
    # a toy_vdesc description: the opener's list is graded beside the motions, as the rubric does
    listed = f"the clip shows the red circle and the blue square . {REFERENCE}"
    unlisted = listed.replace(" and the blue square", "")
    assert toy_grade(listed, listed) == 1.0
    assert toy_grade(unlisted, listed) == score_toy("toy_vdesc", 0, unlisted, listed) < 1.0
    assert toy_answer(HALF, "where does the blue square go ?") == (
        "the blue square stays at the top right ."
    )
    assert toy_answer(HALF, "where is the green triangle ?") == "not stated ."


# ---------------------------------------------------------------------------------------------
# round trips


def test_vdd_round_trip_scores_perfect_5_and_wrong_lower():
    with EmbeddedJudge() as judge:
        client = JudgeClient(endpoint(judge))
        perfect, half, wrong = judge_items(
            [vdd(REFERENCE), vdd(HALF), vdd("a dog runs .")], client, None
        )
        assert judge.requests == 3
    assert perfect.score == 5.0 and perfect.error is None and perfect.calls == 1
    assert half.score == 4.0  # floor(5 * 0.75 + 0.5)
    assert wrong.score == 0.0
    assert client.calls == 3 and not any(j.cached for j in (perfect, half, wrong))


def test_vdc_asks_each_question_then_scores_each_answer_and_averages():
    asked, graded = [], []

    def answerer(caption, question):
        asked.append(question)
        return toy_answer(caption, question)

    def grader(answer, reference):
        graded.append((answer, reference))
        return toy_grade(answer, reference)

    with EmbeddedJudge(grader=grader, answerer=answerer) as judge:
        client = JudgeClient(endpoint(judge))
        (judged,) = judge_items([JudgeItem("vdc", QUESTION, REFERENCE, HALF, qa=QA)], client, None)
        assert judge.requests == 4
    assert asked == [q for q, _ in QA]  # stage 1, once per question
    assert graded == [  # stage 2 scores stage 1's answer against the question's answer
        (RED, RED),
        ("the blue square stays at the top right .", BLUE),
    ]
    assert judged.score == (5 + 3) / 2  # blue: 1 of 2 stops -> floor(2.5 + 0.5) = 3
    assert judged.calls == 4 == client.calls


def test_models_endpoint_and_unknown_prompts():
    with EmbeddedJudge() as judge:
        with urllib.request.urlopen(judge.base_url + "/models", timeout=2) as reply:
            assert json.load(reply)["data"][0]["id"] == MODEL
        request = urllib.request.Request(
            judge.base_url + "/chat/completions",
            json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode(),
            {"Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request, timeout=2)
        assert err.value.code == 400


# ---------------------------------------------------------------------------------------------
# faults


@pytest.mark.parametrize("fault", ["500", "malformed", "timeout:1"])
def test_transient_fault_is_retried(fault):
    with EmbeddedJudge(faults=[fault]) as judge:
        client = JudgeClient(endpoint(judge, timeout_s=0.3))
        (judged,) = judge_items([vdd(REFERENCE)], client, None)
        assert judge.requests == 2
    assert judged.score == 5.0 and judged.error is None
    assert judged.calls == 2 == client.calls


def test_slow_replies_fail_the_item_not_the_batch():
    with EmbeddedJudge(faults=["timeout:0.5", "timeout:0.5"]) as judge:
        client = JudgeClient(endpoint(judge, timeout_s=0.2, max_retries=1))
        slow, fine = judge_items([vdd(HALF), vdd(REFERENCE)], client, None, concurrency=1)
    assert slow.score is None and "no reply within timeout_s=0.2" in slow.error
    assert "after 2 tries" in slow.error and slow.calls == 2
    assert fine.score == 5.0


def test_429_waits_for_retry_after():
    with EmbeddedJudge(faults=["429:0.3"]) as judge:
        client = JudgeClient(endpoint(judge, backoff_s=0.001, max_backoff_s=5))
        start = time.monotonic()
        (judged,) = judge_items([vdd(REFERENCE)], client, None)
        waited = time.monotonic() - start
    assert judged.score == 5.0 and judged.calls == 2
    assert 0.3 <= waited < 2  # Retry-After, not the 1 ms backoff


def test_retry_after_is_capped_by_max_backoff():
    with EmbeddedJudge(faults=["429:30"]) as judge:
        client = JudgeClient(endpoint(judge, max_backoff_s=0.05))
        start = time.monotonic()
        (judged,) = judge_items([vdd(REFERENCE)], client, None)
    assert judged.score == 5.0 and time.monotonic() - start < 2


def test_out_of_range_score_is_a_failure_stored_as_null(tmp_path):
    cache = JudgeCache(tmp_path / "judge")
    with EmbeddedJudge(faults=["bad_score"]) as judge:
        client = JudgeClient(endpoint(judge))
        (judged,) = judge_items([vdd(REFERENCE)], client, cache)
        assert judge.requests == 1  # not retried: at temperature 0 it would repeat
    assert judged.score is None and judged.calls == 1
    assert "score 9" in judged.error and "range [0, 5]" in judged.error
    (row,) = cache_rows(cache)
    assert row["score"] is None and "range [0, 5]" in row["error"]
    assert row["template_version"] == TEMPLATE_VERSION["vdd"]


def test_faults_beyond_max_retries_fail_one_item_and_the_batch_goes_on():
    with EmbeddedJudge(faults=["500", "500", "500"]) as judge:
        client = JudgeClient(endpoint(judge, max_retries=2))
        # one worker: the first item takes all three faults
        failed, good, half = judge_items(
            [vdd("a dog runs ."), vdd(REFERENCE), vdd(HALF)], client, None, concurrency=1
        )
    assert failed.score is None and failed.calls == 3
    assert "HTTP 500" in failed.error and "after 3 tries" in failed.error
    assert (good.score, half.score) == (5.0, 4.0)
    assert client.calls == 5


def test_client_error_is_not_retried():
    with EmbeddedJudge() as judge:
        wrong = JudgeEndpoint(judge.base_url + "/nowhere", "m", backoff_s=0.01)
        (judged,) = judge_items([vdd(REFERENCE)], JudgeClient(wrong), None)
        assert judge.requests == 0
    assert judged.score is None and "HTTP 404" in judged.error and judged.calls == 1


# ---------------------------------------------------------------------------------------------
# cache


def test_rerun_is_served_from_the_cache_with_zero_calls(tmp_path):
    items = [vdd(REFERENCE), vdd(HALF), JudgeItem("vdc", QUESTION, REFERENCE, HALF, qa=QA)]
    cache = JudgeCache(tmp_path / "judge")
    with EmbeddedJudge() as judge:
        first = judge_items(items, JudgeClient(endpoint(judge)), cache)
        served = judge.requests
        rerun_client = JudgeClient(endpoint(judge))
        again = judge_items(items, rerun_client, JudgeCache(tmp_path / "judge"))
        assert judge.requests == served == 6
    assert rerun_client.calls == 0
    assert all(j.cached and j.calls == 0 for j in again)
    assert [j.score for j in again] == [j.score for j in first] == [5.0, 4.0, 4.0]
    rows = cache_rows(cache)
    assert {r["key"] for r in rows} == {cache_key("toy-judge", i) for i in items}
    assert {r["judge_model"] for r in rows} == {"toy-judge"}


def test_key_depends_on_model_template_version_and_texts():
    item = vdd(REFERENCE)
    keys = {
        cache_key("toy-judge", item),
        cache_key("other-judge", item),
        cache_key("toy-judge", vdd(HALF)),
        cache_key("toy-judge", JudgeItem("vdd", "other question", REFERENCE, REFERENCE)),
        cache_key("toy-judge", JudgeItem("vdc", QUESTION, REFERENCE, REFERENCE, qa=QA)),
        cache_key("toy-judge", JudgeItem("vdc", QUESTION, REFERENCE, REFERENCE, qa=QA[:1])),
    }
    assert len(keys) == 6
    assert cache_key("toy-judge", item) == cache_key("toy-judge", vdd(REFERENCE))


def test_failed_item_is_retried_on_rerun_and_replaced(tmp_path):
    cache = JudgeCache(tmp_path / "judge")
    with EmbeddedJudge(faults=["500", "500"]) as judge:
        client = JudgeClient(endpoint(judge, max_retries=1))
        failed, good = judge_items([vdd(HALF), vdd(REFERENCE)], client, cache, concurrency=1)
        assert failed.score is None and good.score == 5.0
        rerun = JudgeClient(endpoint(judge, max_retries=1))
        retried, served = judge_items([vdd(HALF), vdd(REFERENCE)], rerun, cache)
    assert retried.score == 4.0 and not retried.cached and retried.calls == 1
    assert served.cached and rerun.calls == 1
    half, reference = cache_key("toy-judge", vdd(HALF)), cache_key("toy-judge", vdd(REFERENCE))
    assert {r["key"] for r in cache_rows(cache)} == {half, reference}
    # the stored failure stays beside the success, which is what a lookup serves
    assert JudgeCache(cache.directory).get([half]) == {half: (4.0, None)}


def test_a_failure_never_replaces_a_cached_success(tmp_path):
    cache = JudgeCache(tmp_path / "judge")
    row = dict(key="k", judge_model="m", template="vdd", template_version="v")
    cache.put([{**row, "score": 3.0, "error": None}])
    cache.put([{**row, "score": None, "error": "HTTP 500"}])
    assert cache.get(["k", "missing"]) == {"k": (3.0, None)}
    cache.put([{**row, "score": 4.0, "error": None}])
    assert cache.get(["k"]) == {"k": (4.0, None)}  # the latest success
    assert compact(cache.directory).rows_kept == 1
    assert [(r["score"], r["error"]) for r in cache_rows(cache)] == [(4.0, None)]


def test_concurrent_puts_keep_every_row(tmp_path):
    path = tmp_path / "shared" / "judge"
    writers, puts, per_put = 4, 8, 3

    def write(w: int) -> None:
        cache = JudgeCache(path)  # one object per writer
        for p in range(puts):
            cache.put(
                {"key": f"{w}-{p}-{i}", "judge_model": "m", "template": "vdd", "score": float(w)}
                for i in range(per_put)
            )

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = cache_rows(JudgeCache(path))
    assert len(rows) == len({r["key"] for r in rows}) == writers * puts * per_put
    assert not [p for p in path.iterdir() if p.name.endswith(".tmp")]


# ---------------------------------------------------------------------------------------------
# API key


class _EchoAuth(BaseHTTPRequestHandler):
    """A broken server that echoes the Authorization header it got in a 500 body."""

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = f"bad gateway for {self.headers.get('Authorization')}".encode()
        self.send_response(500)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_api_key_is_sent_and_never_shown(tmp_path, monkeypatch, capfd, caplog):
    caplog.set_level(logging.DEBUG)
    secret = "sk-test-" + secrets.token_hex(16)
    monkeypatch.setenv(KEY_VAR, secret)
    cache = JudgeCache(tmp_path / "judge")
    with EmbeddedJudge(api_key=secret) as judge:
        keyed = endpoint(judge, api_key_env=KEY_VAR)
        good = judge_items([vdd(REFERENCE), vdd(HALF)], JudgeClient(keyed), cache)
        keyless = endpoint(judge)
        refused = judge_items([vdd("a dog runs .")], JudgeClient(keyless), cache)
    assert [j.score for j in good] == [5.0, 4.0]
    (no_key,) = refused
    assert no_key.score is None and "HTTP 401" in no_key.error and no_key.calls == 1

    echo = ThreadingHTTPServer(("127.0.0.1", 0), _EchoAuth)
    threading.Thread(target=echo.serve_forever, kwargs={"poll_interval": 0.05}).start()
    try:
        url = f"http://127.0.0.1:{echo.server_address[1]}/v1"
        leaky = JudgeEndpoint(url, "m", api_key_env=KEY_VAR, max_retries=1, backoff_s=0.01)
        (echoed,) = judge_items([vdd(REFERENCE)], JudgeClient(leaky), cache)
    finally:
        echo.shutdown()
        echo.server_close()
    assert echoed.score is None and "[api key]" in echoed.error  # the echo, blanked out

    out, err = capfd.readouterr()
    shown = [
        *(Path(shard).read_bytes().decode("latin-1") for shard in cache.shards()),
        repr(cache_rows(cache)),
        *(j.error or "" for j in [*good, no_key, echoed]),
        repr(keyed),
        repr(leaky),
        repr(judge),
        out,
        err,
        caplog.text,
    ]
    assert "retry 1/1" in caplog.text  # the retry was logged (with the blanked echo)
    assert not [text for text in shown if secret in text]


def test_unset_key_variable_is_a_clear_error_before_any_request(monkeypatch):
    monkeypatch.delenv(KEY_VAR, raising=False)
    with EmbeddedJudge() as judge:
        with pytest.raises(MissingApiKey, match=KEY_VAR):
            JudgeClient(endpoint(judge, api_key_env=KEY_VAR))
        assert judge.requests == 0


# ---------------------------------------------------------------------------------------------
# unreachable endpoint


def test_refused_connection_aborts_the_batch_and_scores_nothing(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/v1"
    cache = JudgeCache(tmp_path / "judge")
    client = JudgeClient(JudgeEndpoint(url, "m", max_retries=2, backoff_s=0.01))
    with pytest.raises(JudgeUnreachable, match="refused the connection after 3 tries") as err:
        judge_items([vdd(REFERENCE), vdd(HALF)], client, cache)
    assert url in str(err.value)
    assert client.calls >= 3
    assert cache.shards() == []


def test_host_that_never_accepts_is_unreachable_not_slow():
    # a listener whose accept queue is full: the kernel drops further connection attempts, as a
    # firewalled host would, so connecting times out (macOS refuses instead: unreachable too)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    fillers = [socket.socket() for _ in range(3)]
    try:
        for filler in fillers:
            filler.setblocking(False)
            filler.connect_ex(listener.getsockname())
        client = JudgeClient(JudgeEndpoint(url, "m", timeout_s=0.2, max_retries=1, backoff_s=0))
        with pytest.raises(JudgeUnreachable, match=re.escape(url)):
            judge_items([vdd(REFERENCE)], client, None)
    finally:
        for s in [*fillers, listener]:
            s.close()


def test_work_finished_before_the_endpoint_died_is_kept(tmp_path):
    cache = JudgeCache(tmp_path / "judge")
    judge = EmbeddedJudge(grader=lambda answer, reference: (judge.stop(), 1.0)[1])
    with judge:  # the first judgement stops the server: the second finds it gone
        client = JudgeClient(endpoint(judge, max_retries=1))
        with pytest.raises(JudgeUnreachable, match=judge.base_url):
            judge_items([vdd(REFERENCE), vdd(HALF)], client, cache, concurrency=1)
    (row,) = cache_rows(cache)
    assert row["key"] == cache_key("toy-judge", vdd(REFERENCE)) and row["score"] == 5.0


# ---------------------------------------------------------------------------------------------
# concurrency


def test_concurrent_rate_limited_batch_keeps_input_order_and_dedups():
    answers = [REFERENCE, HALF, "a dog runs .", RED, BLUE, f"{RED} {BLUE}"] * 2
    items = [vdd(a, reference=f"{RED} {BLUE}") for a in answers]
    expected = [min(5, int(5 * toy_grade(a, f"{RED} {BLUE}") + 0.5)) for a in answers]
    assert len(set(expected)) > 2  # the order check below can fail
    with EmbeddedJudge() as judge:
        client = JudgeClient(endpoint(judge, requests_per_s=50))
        start = time.monotonic()
        judged = judge_items(items, client, None, concurrency=4)
        elapsed = time.monotonic() - start
        assert judge.requests == 6  # each distinct item once
    assert [j.score for j in judged] == expected
    assert sum(j.calls for j in judged) == client.calls == 6
    assert elapsed >= 5 / 50  # 6 request starts at most 50 a second


def test_standalone_server_serves_until_stopped():
    proc = subprocess.Popen(
        [sys.executable, "-m", "mmspec.scoring.judge.server", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        base_url = next(w for w in line.split() if w.startswith("http://"))
        judge = JudgeEndpoint(base_url.rstrip(";"), "toy-judge", backoff_s=0.01)
        (judged,) = judge_items([vdd(REFERENCE)], JudgeClient(judge), None)
        assert judged.score == 5.0
    finally:
        proc.terminate()
        proc.wait(timeout=10)
