"""txinfra.jsonbody: request bodies as plain JSON or a ValueError naming the problem.

``parse`` reads a body with orjson first and keeps its value only where it is the one the
strict path (``json.loads`` with the checks) gives; these tests hold it to that, on the
inputs that make the two differ (long integers, signed zeros, BOMs and UTF-16, depth,
surrogates, constants) and on generated JSON and arbitrary bytes.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txinfra import jsonbody


def same(a, b) -> bool:
    """Equal as JSON values and of the same Python types (1 is not 1.0, -0.0 not 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def outcome(fn, body):
    try:
        return "value", fn(body)
    except ValueError as exc:
        return "refused", str(exc)


def assert_as_strict(body) -> None:
    """``parse`` gives what the strict path gives: the same value, or a refusal in the
    same words."""
    fast, strict = outcome(jsonbody.parse, body), outcome(jsonbody._parse_strictly, body)
    assert fast[0] == strict[0], (body, fast, strict)
    if fast[0] == "value":
        assert same(fast[1], strict[1]), (body, fast, strict)
    else:
        assert fast[1] == strict[1]


@pytest.mark.parametrize("body", [
    b"9223372036854775807", b"-9223372036854775808", b"-9223372036854775809",
    b"18446744073709551615", b"18446744073709551616", b"-9999999999999999999",
    b"123456789012345678901234567890", b'{"n": -12345678901234567890}',
    b'"1234567890123456789012"',  # a long run in a string: strict path, same value
    b"-0", b"-0.0", b"0.0", b"1e-400", b"-1e-400", b"1E308", b"1.7976931348623157e308",
    b"0.1000000000000000055511151231257827", b"1e2",
    b"\xef\xbb\xbf[1]", "[1]".encode("utf-16"), b"\x00[\x001\x00]", b" [1] ",
    b'"\\ud800"', b'"\\udfff\\ud800"', b'"\\ud83d\\ude00"', '"\ud800"', b'{"\\ud800": 1}',
    b'"\xed\xa0\x80"', b"\xff", b'"\x01"', b"NaN", b"-Infinity", b"[Infinity]", b"1e999",
    b"[1,]", b"01", b"", b"[]", b"{}", b"null", b'{"a": 1, "a": 2}',
    b"[" * 64 + b"]" * 64, b"[" * 65 + b"]" * 65, b"[" * 2000 + b"]" * 2000,
    b'[{"a": [{"b": [' * 20 + b']}]}]' * 20, b'["[[[[" ' + b', "{{{{"' * 40 + b"]",
])
def test_the_fast_path_gives_what_the_strict_path_gives(body):
    assert_as_strict(body)


def test_refusals_say_what_is_wrong():
    cases = {b"NaN": "NaN is not a JSON number", b"[1e999]": "too large for a double",
             b'"\\ud800"': "lone UTF-16 surrogate", b"[" * 65 + b"]" * 65: "64 levels deep",
             b"[" * 5000 + b"]" * 5000: "64 levels deep", b"[1,]": "Expecting value"}
    for body, words in cases.items():
        with pytest.raises(ValueError, match=words):
            jsonbody.parse(body)


values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=40)


@settings(max_examples=400, deadline=None)
@given(values, st.booleans(), st.sampled_from([None, (",", ":")]))
def test_generated_json_reads_the_same_both_ways(value, ascii_only, separators):
    text = json.dumps(value, ensure_ascii=ascii_only, separators=separators)
    assert_as_strict(text.encode())
    assert_as_strict(text)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=60) | st.text(alphabet='[]{}",:0123456789-+.eE \\u', max_size=60))
def test_arbitrary_input_is_refused_or_read_the_same_both_ways(body):
    assert_as_strict(body)


def test_what_orjson_does_not_write_is_written_as_json_dumps_writes_it():
    for value in ({"n": 2**70, "s": "é"}, {1: "a"}, [{"deep": [-(2**64)]}]):
        assert jsonbody.parse(jsonbody.dumps(value)) == json.loads(json.dumps(value))
    assert jsonbody.dumps({"a": [1, "é", None]}) == '{"a":[1,"é",null]}'.encode()
    # Not Unicode text (orjson refuses it): escaped, so it reads back as it was.
    assert json.loads(jsonbody.dumps({"s": "a\ud800b"})) == {"s": "a\ud800b"}
