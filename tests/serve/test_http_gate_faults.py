"""``batchlab http check`` can fail: a fake server (fake_openai.py) answers from the
goldens, and each seeded fault makes exactly the check that owns it FAIL (or ERROR for a
server that is down or answers garbage); without a fault, all three PASS."""

from __future__ import annotations

import pytest
from fake_openai import FakeServer

from batchlab.cli import main
from batchlab.commands.http import DEFAULT_HTTP_MATRIX
from batchlab.defaults import DEFAULT_GOLDENS
from batchlab.http_gate.run import CHECKS, run_checks
from batchlab.http_gate.wire import Api


def check(url: str) -> dict[str, tuple[str, str]]:
    results, _ = run_checks(Api(url=url, timeout_s=20), model="llama", served=None,
                            checks=CHECKS, matrix=DEFAULT_HTTP_MATRIX, goldens=DEFAULT_GOLDENS,
                            trials=2, fillers=3)
    return {r.check: (str(r.status), r.difference) for r in results}


def test_a_faithful_server_passes_every_check():
    with FakeServer() as fake:
        got = check(fake.url)
    assert {k: v[0] for k, v in got.items()} == dict.fromkeys(CHECKS, "PASS"), got


ONE = "l1/llama/B1/explicit/http-one/ctx-explicit/steps16"


@pytest.mark.parametrize(("fault", "failing"), [
    # a wrong greedy token is also not the likeliest of its alternatives
    ("token", {"alone": f"first token difference: {ONE}, step 3: token 28, golden 27",
               "consistency": f"logprob: {ONE}: step 3: the reported logprob"}),
    ("logprob", {"alone": f"first token difference: none: all 48 tokens equal the golden's; "
                           f"first logprob difference: {ONE}, step 0: logprob -2.8125 of "
                           "token 143, golden -2.65625",
                 "consistency": f"logprob: {ONE}: step 0: the reported logprob -2.8125 of "
                                "token 143 is not its value among the alternatives"}),
    ("usage", {"consistency": f"usage: {ONE}: usage.completion_tokens 17, 16 tokens came "
                              "back"}),
    ("batch", {"needle": "in flight with it): step 0 (token 269): logprob -2.6562502384185"}),
    ("stop", {"consistency": "stop: l1/llama/B1/explicit/http-"}),
])
def test_each_seeded_fault_fails_its_check(fault, failing):
    with FakeServer(frozenset({fault})) as fake:
        got = check(fake.url)
    assert {k: s for k, (s, _) in got.items()} == {
        k: "FAIL" if k in failing else "PASS" for k in CHECKS}, got
    for name, says in failing.items():
        assert says in got[name][1], got[name]


def test_a_server_that_says_whom_the_needle_decoded_beside_passes_with_it():
    with FakeServer(frozenset({"peaks"})) as fake:
        results, _ = run_checks(Api(url=fake.url, timeout_s=20), model="llama", served=None,
                                checks=("needle",), matrix=DEFAULT_HTTP_MATRIX,
                                goldens=DEFAULT_GOLDENS, trials=2, fillers=3)
    (needle,) = results
    assert (needle.status, needle.difference) == ("PASS", "")
    assert "largest decode batch per trial, as the server saw it [2, 2]" in needle.compared


def test_a_server_that_decodes_the_needle_alone_is_unsupported_not_a_pass():
    # the vacuous pass: bit-equal answers, because nothing shared a batch with the needle
    with FakeServer(frozenset({"serial"})) as fake:
        got = check(fake.url)
        sent = fake.started
    assert got["needle"] == (
        "UNSUPPORTED", "the server decoded the needle alone in every trial (4 tries each): "
        "batch invariance was not tested; give the server a larger batch or more --fillers")
    assert got["alone"][0] == got["consistency"][0] == "PASS"
    # each of the 2 trials sent 4 times (needle and 3 fillers), beside the rest
    assert sent >= 2 * 4 * 4


def test_a_needle_batch_report_that_is_not_a_count_is_an_error():
    with FakeServer(frozenset({"bad-peaks"})) as fake:
        got = check(fake.url)
    assert got["needle"][0] == "ERROR"
    assert "choices[0].batchlab.peak_decode_rows is not a positive integer" in got["needle"][1]


def test_a_server_that_answers_garbage_is_error():
    with FakeServer(frozenset({"garbage"})) as fake:
        got = check(fake.url)
    assert {k: v[0] for k, v in got.items()} == dict.fromkeys(CHECKS, "ERROR")
    assert "the answer is not JSON: '<html>not json</html>'" in got["alone"][1]


def test_a_server_that_is_down_is_error_and_the_command_exits_1(tmp_path):
    with FakeServer() as fake:
        url = fake.url  # closed on leaving: nothing listens there now
    got = check(url)
    assert {k: v[0] for k, v in got.items()} == dict.fromkeys(CHECKS, "ERROR")
    assert "no answer" in got["alone"][1] and "is the server running" in got["alone"][1]
    junit = tmp_path / "http.xml"
    assert main(["http", "check", "--url", url, "--model", "llama", "--junit", str(junit)]) == 1
    assert junit.read_text().count("<error ") == 3


def test_a_server_that_refuses_token_ids_gets_the_exact_text_and_its_dialect():
    """mlx_lm.server's dialect: ids refused (404), logprobs as a flag; the ASCII prompts go
    as text and the checks pass; its bug (each entry named by its first alternative) is
    consistency's FAIL, the tokens and logprobs read without alternatives stay exact."""
    with FakeServer(dialect="mlx") as fake:
        results, how = run_checks(Api(url=fake.url), model="llama", served=None,
                                  checks=CHECKS, matrix=DEFAULT_HTTP_MATRIX,
                                  goldens=DEFAULT_GOLDENS, trials=1, fillers=2)
    assert how == ("prompt as text (ids refused: HTTP 404); logprobs: true, top_logprobs: K; "
                   "return_tokens_as_token_ids sent")
    assert [str(r.status) for r in results] == ["PASS", "PASS", "PASS"], results
    with FakeServer(frozenset({"mlx-naming"}), dialect="mlx") as fake:
        got = check(fake.url)
    assert {k: s for k, (s, _) in got.items()} == {
        "alone": "PASS", "needle": "PASS", "consistency": "FAIL"}, got
    assert got["consistency"][1].startswith(
        f"ids: {ONE}: step 0: with top_logprobs, a logprob entry names 80, without, the "
        "answer's token is 143; logprob: ")


def test_a_missing_golden_is_error_never_a_pass(tmp_path):
    with FakeServer() as fake:
        results, _ = run_checks(Api(url=fake.url), model="llama", served=None, checks=CHECKS,
                                matrix=DEFAULT_HTTP_MATRIX, goldens=tmp_path)
    assert [str(r.status) for r in results] == ["ERROR"] * 3
    assert results[0].difference.startswith("NO-GOLDEN: golden ")
    assert "batchlab golden regen --matrix" in results[0].difference
