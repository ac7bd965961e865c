"""What a JSON request body must be before any route sees it: UTF-8 JSON text (RFC 8259 §8.1) whose objects have
unique keys.

FastAPI parses bodies with `json.loads` on bytes, which also takes UTF-16/32 and a byte order mark, the
non-JSON constants `NaN`/`Infinity`, and duplicate keys (the last one wins). Each is a gap between what a client
meant and what a route acts on, so the body layer (`metaservice.api.limits`) calls `check_json` once for every
request, before routing. Number strictness (`1e3`, `1.0` are not ids) is the request models' part
(`metaservice.schemas.Request`): only they know which fields are integers.
"""

from __future__ import annotations

import json
from typing import Any


class BodyProblem(ValueError):
    """Why a body is refused; `kind` becomes the `type` of the 422's error entry."""

    def __init__(self, message: str, *, kind: str) -> None:
        super().__init__(message)
        self.message, self.kind = message, kind


def is_json(content_type: str | None) -> bool:
    """Whether FastAPI would parse a body of this media type as JSON (no type at all counts as JSON)."""
    if not content_type:
        return True
    media = _media_type(content_type)
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def check_json(body: bytes, content_type: str | None) -> None:
    """Raise `BodyProblem` unless `body` is one UTF-8 JSON text with unique keys and no NaN/Infinity."""
    charset = _charset(content_type) if content_type else None
    if charset is not None and charset.lower() not in ("utf-8", "utf8"):
        raise BodyProblem(
            f"request bodies must be UTF-8 JSON; the content type says charset={charset}", kind="json_encoding"
        )
    encoding = json.detect_encoding(body)
    if encoding != "utf-8":
        name = "UTF-8 with a byte order mark" if encoding == "utf-8-sig" else encoding.upper()
        raise BodyProblem(
            f"request bodies must be UTF-8 JSON without a byte order mark; this one is {name}", kind="json_encoding"
        )
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyProblem(
            f"request bodies must be UTF-8 JSON; byte {exc.start} (0x{body[exc.start]:02x}) is not UTF-8",
            kind="json_encoding",
        ) from exc
    try:
        json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except BodyProblem:
        raise
    except json.JSONDecodeError as exc:
        raise BodyProblem(f"the request body is not valid JSON: {exc}", kind="json_invalid") from exc
    except RecursionError as exc:
        raise BodyProblem("the request body is nested too deeply", kind="json_invalid") from exc
    except ValueError as exc:  # e.g. an integer beyond Python's digit limit
        raise BodyProblem(f"the request body is not valid JSON: {exc}", kind="json_invalid") from exc


def _media_type(content_type: str) -> str:
    return content_type.partition(";")[0].strip().lower()


def _charset(content_type: str) -> str | None:
    """The `charset` parameter (RFC 9110 §8.3.1: `type/subtype; name=value`, value possibly quoted)."""
    for parameter in content_type.split(";")[1:]:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset":
            return value.strip().strip('"')
    return None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise BodyProblem(f"the request body repeats the key {key!r} in one JSON object", kind="json_duplicate_key")
        found[key] = value
    return found


def _no_constant(name: str) -> Any:
    raise BodyProblem(f"the request body is not valid JSON: {name} is not a JSON number", kind="json_invalid")
