"""`GET /lineage` writes its answers with orjson (a 20,000-node answer, 8.6 MB: 23 -> 9 ms), whose bytes must be
those of pydantic, the serialiser of the declared response model, for every kind of value an answer holds: names,
ids and barriers up to 2**63 - 1, seconds as finite floats, flags, nulls, and times (UTC from the database; an
`as_of` time keeps the offset it was given in, whole minutes)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson
import pydantic_core
from hypothesis import given, settings
from hypothesis import strategies as st

offsets = st.integers(min_value=-(24 * 60 - 1), max_value=24 * 60 - 1).map(lambda m: timezone(timedelta(minutes=m)))
times = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC) | offsets)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
    | times
)
answers = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4)
)


@settings(max_examples=500)
@given(answers)
def test_orjson_writes_what_pydantic_writes(value: Any) -> None:
    assert orjson.dumps(value, option=orjson.OPT_UTC_Z) == pydantic_core.to_json(value)


@given(st.floats(allow_nan=False, allow_infinity=False), times)
def test_seconds_and_times_are_written_alike(seconds: float, time: datetime) -> None:
    node = {"newest_complete_issued_at": time, "freshness_seconds": seconds, "lag_seconds": None}
    assert orjson.dumps(node, option=orjson.OPT_UTC_Z) == pydantic_core.to_json(node)
