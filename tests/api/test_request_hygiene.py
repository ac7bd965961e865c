"""Request and log hygiene over HTTP against a real `metaservice serve` (issue 13, "Requests").

- A body that did not arrive whole changes nothing: raw sockets cut a chunked body, send a malformed chunk size
  or cut a Content-Length body short; the route never runs (no barrier, no 201 in the access log).
- Numbers are JSON integers only where ids and snapshots are expected; barrier path segments are plain digits.
- Bodies are UTF-8 JSON without duplicate keys (422 `invalid_request` naming the problem, nothing changes).
- No redirect takes its host from the request.
- One request is one log line, in text and in JSON logging.

orders ──► enrich ──► orders_enriched   (the fixture `enrich`)
"""

from __future__ import annotations

import json
import logging
import socket
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests import support
from tests.support import assert_problem, table_path

ORDERS, ENRICHED = "lake.raw.orders", "lake.mart.orders_enriched"
FORGED = "2026-11-23 20:00:00,000 INFO metaservice.access [forged] 127.0.0.1"


def barriers(api: httpx.Client) -> list[int]:
    return [b["barrier"] for b in api.get("/barriers").json()["barriers"]]


def latest_snapshot(api: httpx.Client, table: str) -> int | None:
    response = api.get(f"/tables/{table_path(table)}")
    assert response.status_code == 200, response.text
    value: int | None = response.json()["latest_snapshot_id"]
    return value


def post_raw(api: httpx.Client, url: str, body: bytes, **headers: str) -> httpx.Response:
    return api.post(url, content=body, headers={"content-type": "application/json", **headers})


@pytest.fixture(name="enrich")
def fx_enrich(api: httpx.Client) -> httpx.Client:
    assert api.post(f"/register/source/enrich/{table_path(ORDERS)}").status_code == 201
    assert api.post(f"/register/sink/enrich/{table_path(ENRICHED)}").status_code == 201
    return api


def log_lines(server: support.ServerProcess) -> list[str]:
    assert server.log_path is not None
    return server.log_path.read_bytes().decode("utf-8", errors="replace").splitlines()


def access_line(server: support.ServerProcess, request_id: str) -> str:
    """The access log line (text or JSON) of request `request_id`, once the server has written it: the request
    is over."""
    found: list[str] = []

    def written() -> bool:
        found[:] = [line for line in log_lines(server) if "metaservice.access" in line and request_id in line]
        return bool(found)

    support.wait_until(written, timeout=30, what=f"the access log line of request {request_id}")
    assert len(found) == 1, found
    return found[0]


# --- a body that did not arrive whole changes nothing ---------------------------------------------------------


def raw_exchange(server: support.ServerProcess, data: bytes, *, read_answer: bool) -> bytes:
    """Send `data` on a fresh connection and close it; with `read_answer`, first read until the server closes."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as conn:
        conn.sendall(data)
        if not read_answer:
            return b""
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
        return answer


def chunked_head(request_id: str, target: str = "/barriers") -> bytes:
    return (
        f"POST {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Transfer-Encoding: chunked\r\nX-Request-ID: {request_id}\r\n\r\n"
    ).encode()


def test_chunked_post_cut_off_before_its_body_issues_no_barrier(
    api: httpx.Client, server: support.ServerProcess
) -> None:
    rid = f"cut-{uuid.uuid4().hex}"
    raw_exchange(server, chunked_head(rid), read_answer=False)
    line = access_line(server, rid)
    assert '"POST /barriers" 499' in line, line  # logged as "client closed the request", never run
    assert barriers(api) == []


def test_chunked_post_cut_off_inside_its_body_changes_nothing(
    enrich: httpx.Client, server: support.ServerProcess
) -> None:
    api = enrich
    rid = f"cut-{uuid.uuid4().hex}"
    body = json.dumps({"root_snapshots": {ORDERS: 7}}).encode()
    first_chunk = f"{len(body):x}\r\n".encode() + body + b"\r\n"  # a whole first chunk, then no terminating chunk
    raw_exchange(server, chunked_head(rid) + first_chunk, read_answer=False)
    assert " 499 " in access_line(server, rid)
    assert barriers(api) == []
    assert latest_snapshot(api, ORDERS) is None


def test_malformed_chunk_size_gets_400_and_issues_no_barrier(api: httpx.Client, server: support.ServerProcess) -> None:
    rid = f"badchunk-{uuid.uuid4().hex}"
    answer = raw_exchange(server, chunked_head(rid) + b"zz\r\n{}\r\n0\r\n\r\n", read_answer=True)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    line = access_line(server, rid)
    assert " 201 " not in line, line
    assert barriers(api) == []


def test_content_length_body_cut_short_issues_no_barrier(api: httpx.Client, server: support.ServerProcess) -> None:
    rid = f"short-{uuid.uuid4().hex}"
    head = (
        "POST /barriers HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: 200\r\nX-Request-ID: {rid}\r\n\r\n"
    ).encode()
    raw_exchange(server, head + b'{"root_snapshots": {', read_answer=False)
    assert " 499 " in access_line(server, rid)
    assert barriers(api) == []


def test_whole_chunked_body_is_served(enrich: httpx.Client) -> None:
    """The body layer waits for the last chunk and then runs the route with the whole body."""
    api = enrich
    body = json.dumps({"root_snapshots": {ORDERS: 7}}).encode()

    def chunks() -> Iterator[bytes]:
        yield body[:5]
        yield body[5:]

    response = api.post("/barriers", content=chunks(), headers={"content-type": "application/json"})
    assert "content-length" not in response.request.headers
    assert response.status_code == 201, response.text
    assert response.json()["sealed"] == {ORDERS: 7}
    assert latest_snapshot(api, ORDERS) == 7


# --- numbers are JSON integers; path ids are plain digits ---------------------------------------------------------


@pytest.mark.parametrize("number", ["1e3", "1.0", "1000.0", "1E3", "true", '"5"'])
def test_snapshot_ids_must_be_json_integers(enrich: httpx.Client, number: str) -> None:
    api = enrich
    for url, body, loc in (
        ("/barriers", f'{{"root_snapshots": {{"{ORDERS}": {number}}}}}', ["body", "root_snapshots", ORDERS]),
        (
            "/jobs/enrich/barriers/next",
            f'{{"root_snapshots": {{"{ORDERS}": {number}}}}}',
            ["body", "root_snapshots", ORDERS],
        ),
        (f"/tables/{table_path(ORDERS)}/snapshots", f'{{"snapshot_id": {number}}}', ["body", "snapshot_id"]),
    ):
        answer = assert_problem(post_raw(api, url, body.encode()), 422, "invalid_request")
        assert [e["loc"] for e in answer["errors"]] == [loc], answer
    assert barriers(api) == []
    assert latest_snapshot(api, ORDERS) is None
    assert api.get("/jobs/enrich/barriers").json()["runs"] == []


def test_commit_snapshots_must_be_json_integers(enrich: httpx.Client) -> None:
    api = enrich
    decision = api.post("/jobs/enrich/barriers/next", json={"root_snapshots": {ORDERS: 3}}).json()
    assert decision["action"] == "process", decision
    url = f"/jobs/enrich/barriers/{decision['barrier']}/commit"
    assert_problem(post_raw(api, url, f'{{"snapshots": {{"{ENRICHED}": 1.0}}}}'.encode()), 422, "invalid_request")
    assert latest_snapshot(api, ENRICHED) is None
    assert api.get("/jobs/enrich").json()["in_flight_barrier"] == decision["barrier"]
    assert api.post(url, json={"snapshots": {ENRICHED: 1}}).status_code == 200


@pytest.mark.parametrize(
    "segment",
    ["{b:_}", "+{b}", "%20{b}", "{b}%20", "{b}.0", "0x{b:x}", "{b}e0", "{fullwidth}", "0{b}x", "-{b}"],
)
def test_barrier_path_segments_are_plain_digits(api: httpx.Client, segment: str) -> None:
    issued = api.post("/barriers", json={})
    assert issued.status_code == 201, issued.text
    b = issued.json()["barrier"]
    fullwidth = "".join(chr(0xFF10 + int(d)) for d in str(b))  # digits of another script: str.isdigit() says yes
    bad = segment.format(b=b, fullwidth=fullwidth)
    assert api.get(f"/barriers/{b}").status_code == 200  # the plain form names the barrier
    body = assert_problem(api.get(f"/barriers/{bad}"), 422, "invalid_request")
    assert [e["loc"] for e in body["errors"]] == [["path", "barrier"]], body
    assert "barrier" not in body  # never parsed into a number (a 404 would echo it)


def test_commit_on_a_barrier_segment_that_is_not_plain_digits_commits_nothing(enrich: httpx.Client) -> None:
    api = enrich
    decision = api.post("/jobs/enrich/barriers/next", json={"root_snapshots": {ORDERS: 3}}).json()
    response = api.post(f"/jobs/enrich/barriers/+{decision['barrier']}/commit", json={"snapshots": {ENRICHED: 1}})
    assert_problem(response, 422, "invalid_request")
    assert latest_snapshot(api, ENRICHED) is None
    assert api.get("/jobs/enrich").json()["in_flight_barrier"] == decision["barrier"]


# --- bodies are UTF-8 JSON without duplicate keys -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("encoding", "named"),
    [
        ("utf-16", "UTF-16"),
        ("utf-16-le", "UTF-16"),
        ("utf-16-be", "UTF-16"),
        ("utf-32", "UTF-32"),
        ("utf-8-sig", "byte order mark"),
    ],
)
def test_body_in_another_encoding_is_invalid_request(enrich: httpx.Client, encoding: str, named: str) -> None:
    api = enrich
    body = json.dumps({"root_snapshots": {ORDERS: 7}}).encode(encoding)
    answer = assert_problem(post_raw(api, "/barriers", body), 422, "invalid_request", names=(named,))
    assert answer["errors"] == [{"loc": ["body"], "msg": answer["errors"][0]["msg"], "type": "json_encoding"}]
    assert barriers(api) == []
    assert latest_snapshot(api, ORDERS) is None


def test_body_declared_in_another_charset_is_invalid_request(enrich: httpx.Client) -> None:
    api = enrich
    body = json.dumps({"root_snapshots": {ORDERS: 7}}).encode()
    response = post_raw(api, "/barriers", body, **{"content-type": "application/json; charset=iso-8859-1"})
    assert_problem(response, 422, "invalid_request", names=("UTF-8", "iso-8859-1"))
    assert barriers(api) == []
    assert post_raw(api, "/barriers", body, **{"content-type": "application/json; charset=UTF-8"}).status_code == 201


@pytest.mark.parametrize(
    ("url", "body", "key"),
    [
        ("/barriers", f'{{"root_snapshots": {{"{ORDERS}": 1, "{ORDERS}": 5}}}}', ORDERS),
        ("/barriers", '{"root_snapshots": {}, "root_snapshots": {"lake.raw.orders": 5}}', "root_snapshots"),
        ("/jobs/enrich/barriers/next", f'{{"root_snapshots": {{"{ORDERS}": 9, "{ORDERS}": 5}}}}', ORDERS),
        (f"/tables/{table_path(ORDERS)}/snapshots", '{"snapshot_id": 1, "snapshot_id": 5}', "snapshot_id"),
    ],
)
def test_duplicate_keys_are_invalid_request(enrich: httpx.Client, url: str, body: str, key: str) -> None:
    api = enrich
    answer = assert_problem(post_raw(api, url, body.encode()), 422, "invalid_request", names=(key, "repeats"))
    assert answer["errors"][0]["type"] == "json_duplicate_key"
    assert barriers(api) == []
    assert latest_snapshot(api, ORDERS) is None
    assert api.get("/jobs/enrich/barriers").json()["runs"] == []


@pytest.mark.parametrize(
    ("body", "named"),
    [(b'{"root_snapshots": {"lake.raw.orders": NaN}}', "NaN"), (b"[" * 100_000, "nested"), (b"\x00{}", "")],
)
def test_bodies_that_are_not_json_text_are_invalid_request(enrich: httpx.Client, body: bytes, named: str) -> None:
    api = enrich
    assert_problem(post_raw(api, "/barriers", body), 422, "invalid_request", names=(named,))
    assert barriers(api) == []


# --- no redirect takes its host from the request ----------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_trailing_slash_is_a_404_problem_and_never_a_redirect(enrich: httpx.Client, method: str) -> None:
    api = enrich
    target = "/jobs/enrich/barriers" if method == "GET" else "/barriers"
    response = api.request(method, f"{target}/", headers={"Host": "evil.example"}, follow_redirects=False)
    assert_problem(response, 404, "not_found", names=(f"without the trailing slash: {target}",))
    assert "location" not in response.headers
    assert barriers(api) == []


@pytest.mark.parametrize(("url", "location"), [("/ui", "/ui/"), ("/ui?refresh=1", "/ui/?refresh=1")])
def test_ui_redirect_is_relative_whatever_the_host_header(api: httpx.Client, url: str, location: str) -> None:
    response = api.get(url, headers={"Host": "evil.example"}, follow_redirects=False)
    assert response.status_code == 307
    assert response.headers["location"] == location
    page = api.get(url, follow_redirects=True)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")


# --- one request, one log line --------------------------------------------------------------------------------------

FORGING_PATH = "/jobs%0a" + FORGED.replace(" ", "%20").replace("[", "%5B").replace("]", "%5D")


def request_with_id(api: httpx.Client, url: str) -> str:
    rid = uuid.uuid4().hex
    assert api.get(url, headers={"X-Request-ID": rid}).status_code == 404
    return rid


def test_text_log_escapes_a_newline_in_the_path(api: httpx.Client, server: support.ServerProcess) -> None:
    rid = request_with_id(api, FORGING_PATH)
    line = access_line(server, rid)
    assert "/jobs\\n" + FORGED in line, line
    assert not any(entry.startswith(FORGED[:23]) for entry in log_lines(server))  # no line starts forged


def test_text_log_never_writes_nul_or_line_separators_raw(api: httpx.Client, server: support.ServerProcess) -> None:
    rid = request_with_id(api, "/jobs%00x%e2%80%a8y%0dz%1b[31m")
    line = access_line(server, rid)
    assert "/jobs\\x00x\\u2028y\\rz\\x1b[31m" in line, line
    assert server.log_path is not None
    raw = server.log_path.read_bytes()
    assert b"\x00" not in raw and "\u2028".encode() not in raw and b"\x1b" not in raw


def test_json_log_keeps_one_request_on_one_line(database_url: str, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    server = support.ServerProcess(database_url, env={"METASERVICE_LOG_JSON": "true"}, log_path=log).start()
    try:
        with httpx.Client(base_url=server.base_url, timeout=30) as api:
            forged, nul = request_with_id(api, FORGING_PATH), request_with_id(api, "/jobs%00x%e2%80%a8y")
        access_line(server, nul)
    finally:
        server.stop()
    records = []
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            records.append(json.loads(line))  # every record line is one whole JSON object
        else:
            assert not line.startswith(FORGED[:4]), line
    by_id = {r["request_id"]: r for r in records if r["logger"] == "metaservice.access"}
    assert by_id[forged]["path"] == "/jobs\n" + FORGED
    assert by_id[nul]["path"] == "/jobs\x00x\u2028y"
    assert b"\x00" not in log.read_bytes()


def test_text_formatter_indents_tracebacks_so_no_line_passes_for_a_record() -> None:
    from metaservice.observability import TextFormatter

    formatter = TextFormatter("%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        raise ValueError(f"bad path /jobs\n{FORGED}")
    except ValueError:
        record = logging.LogRecord(
            "metaservice", logging.ERROR, __file__, 1, "failed on %s", ("/a\nb",), sys.exc_info()
        )
    lines = formatter.format(record).split("\n")
    assert lines[0].endswith("failed on /a\\nb")
    assert all(line.startswith("    ") for line in lines[1:]), lines
    assert any(FORGED in line for line in lines[1:])
