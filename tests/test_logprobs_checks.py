"""The LOGPROBS checks' arithmetic on shapes real engines send, without a server.

A character split across two tokens is legal: llama.cpp keeps the token's valid UTF-8 prefix in
``token`` and the raw piece in ``bytes``; vLLM (since its decoded-token correction) gives the
partial token "" and the completing one the whole character. Both must spell the answer.
"""

from __future__ import annotations

import pytest

from servecheck.checks.surfaces.logprobs import comparable, joined_text, value_problems

NI = "你".encode()  # three bytes: e4 bd a0


def _entry(token, logprob, raw=None, top=None):
    raw = list(token.encode()) if raw is None else raw
    tops = top if top is not None else [{"token": token, "logprob": logprob, "bytes": raw}]
    return {"token": token, "logprob": logprob, "bytes": raw, "top_logprobs": tops}


SPLIT_LLAMACPP = [
    _entry(" a", -0.1),
    _entry("", -0.2, list(NI[:2])),
    _entry("", -0.3, list(NI[2:])),
]
SPLIT_VLLM = [_entry(" a", -0.1), _entry("", -0.2, []), _entry("你", -0.3)]


@pytest.mark.parametrize(
    "entries",
    [
        pytest.param(SPLIT_LLAMACPP, id="llamacpp-raw-bytes"),
        pytest.param(SPLIT_VLLM, id="vllm-corrected"),
    ],
)
def test_a_character_split_across_tokens_spells_the_answer(entries):
    assert joined_text(entries) == " a你"
    assert value_problems(entries, 1) == []


def test_tokens_without_bytes_join_as_strings():
    entries = [{"token": " a", "logprob": -0.1, "bytes": None, "top_logprobs": []}]
    assert joined_text(entries) == " a"


def test_replacement_characters_are_left_out_of_the_comparison():
    # invalid UTF-8 from a random model: one U+FFFD in the answer, two in tokens decoded alone
    assert comparable("x\ufffd") == comparable("x\ufffd\ufffd") == "x"


@pytest.mark.parametrize(
    "entry,problem",
    [
        pytest.param(_entry("a", 0.5), "> 0", id="positive"),
        pytest.param(_entry("a", float("-inf")), "not a finite number", id="minus-infinity"),
        pytest.param(_entry("a", True), "not a finite number", id="bool"),
        pytest.param(
            _entry("a", -0.1, [300]), "not null or a list of byte values", id="byte-out-of-range"
        ),
        pytest.param(
            _entry("a", -0.1, list(b"b")),
            "spell 'b', not its token 'a'",
            id="bytes-of-another-token",
        ),
        pytest.param(
            _entry("a", -0.1, top=[{"token": "b", "logprob": -0.5, "bytes": None}]),
            "above every top_logprobs entry",
            id="sampled-above-its-top-list",
        ),
        pytest.param(
            _entry("a", -0.1, top=[{"token": "a", "logprob": -0.01, "bytes": [97]}]),
            "but -0.01 in its own top_logprobs",
            id="two-values-for-one-token",
        ),
    ],
)
def test_malformed_values_are_named(entry, problem):
    problems = value_problems([entry], 1)
    assert any(problem in p for p in problems), problems


def test_sentinels_for_minus_infinity_are_finite_and_legal():
    lowest = -3.4028234663852886e38  # llama.cpp's std::numeric_limits<float>::lowest()
    tops = [
        {"token": "a", "logprob": -0.1, "bytes": [97]},
        {"token": "b", "logprob": -9999.0, "bytes": [98]},  # vLLM's clamp
        {"token": "c", "logprob": lowest, "bytes": [99]},
    ]
    assert value_problems([_entry("a", -0.1, top=tops)], 3) == []


def test_the_top_list_need_not_be_sorted_but_must_have_the_count():
    # vLLM puts the sampled token first even when it is not the most likely
    tops = [
        {"token": "a", "logprob": -2.0, "bytes": [97]},
        {"token": "b", "logprob": -0.2, "bytes": [98]},
    ]
    assert value_problems([_entry("a", -2.0, top=tops)], 2) == []
    assert value_problems([_entry("a", -2.0, top=tops)], 3) == [
        "content[0].top_logprobs has 2 entries, not 3"
    ]
