"""HTTP transport: http.client connections kept alive and reused, one per
thread, so that a worker's polls, heartbeats and acks do not pay a TCP handshake
each."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import urllib.parse
from email.utils import parsedate_to_datetime
from datetime import datetime, timezone
from typing import Any

from .errors import APIError, Unavailable, error_for

USER_AGENT = "taskforge-python/0.1"

# Errors that mean a kept-alive connection was closed by the server while idle:
# the request did not reach it, so sending it again on a new connection is safe.
_STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


class Response:
    """A decoded answer: status, the parsed JSON body (None when empty) and the
    server's Date header (None when absent)."""

    __slots__ = ("status", "body", "date")

    def __init__(self, status: int, body: Any, date: datetime | None) -> None:
        self.status = status
        self.body = body
        self.date = date


class Transport:
    """Sends JSON requests to one server. Thread-safe: each thread keeps its own
    connection. ``abort()`` ends the request a thread has in flight (used to
    abandon a long poll at shutdown)."""

    def __init__(self, base_url: str, *, token: str | None = None, timeout: float = 30.0) -> None:
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"taskforge: server URL {base_url!r} is not http(s)://host[:port]")
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port
        self._prefix = u.path.rstrip("/")
        self._token = token
        self.timeout = timeout
        self._local = threading.local()
        self._lock = threading.Lock()
        self._conns: set[http.client.HTTPConnection] = set()
        self._closed = False

    def _conn(self, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None:
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
                return conn, True
            with self._lock:
                self._conns.add(conn)  # close() forgot it; it reconnects on use
            return conn, False
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        conn = cls(self._host, self._port, timeout=timeout)
        self._local.conn = conn
        with self._lock:
            self._conns.add(conn)
        return conn, False

    def _drop(self, conn: http.client.HTTPConnection) -> None:
        conn.close()
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None
        with self._lock:
            self._conns.discard(conn)

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        has_body: bool = False,
        timeout: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        """Sends one request and returns the answer, or raises the APIError the
        server answered with (Unavailable when no answer came)."""
        url = self._prefix + path
        if query:
            q = {k: ("true" if v is True else "false" if v is False else v) for k, v in query.items() if v is not None}
            if q:
                url += "?" + urllib.parse.urlencode(q)
        hdrs = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        data: bytes | None = None
        if has_body or body is not None:
            data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
            hdrs["Content-Type"] = "application/json"
        if self._token:
            hdrs["Authorization"] = "Bearer " + self._token
        if headers:
            hdrs.update(headers)
        t = self.timeout if timeout is None else timeout
        for tried in range(2):
            if self._closed:
                raise Unavailable(0, "unavailable", f"{method} {path}: the client is closed")
            conn, reused = self._conn(t)
            try:
                conn.request(method, url, body=data, headers=hdrs)
                resp = conn.getresponse()
                raw = resp.read()
            except _STALE as e:
                self._drop(conn)
                if reused and tried == 0 and not self._closed:
                    continue
                raise Unavailable(0, "unavailable", f"{method} {path}: {e or type(e).__name__}") from e
            except (OSError, http.client.HTTPException) as e:
                self._drop(conn)
                what = "timed out" if isinstance(e, (socket.timeout, TimeoutError)) else str(e) or type(e).__name__
                raise Unavailable(0, "unavailable", f"{method} {path}: {what}") from e
            if resp.will_close:
                self._drop(conn)
            return _decode(method, path, resp, raw)
        raise AssertionError("unreachable")

    def abort_all(self) -> None:
        """Ends the requests in flight and refuses new ones: their callers get
        Unavailable. For a shutdown."""
        self._closed = True
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            sock = c.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        """Closes every kept-alive connection; the next request opens a new one."""
        with self._lock:
            conns = list(self._conns)
            self._conns.clear()
        for c in conns:
            c.close()


def _decode(method: str, path: str, resp: http.client.HTTPResponse, raw: bytes) -> Response:
    date: datetime | None = None
    if d := resp.getheader("Date"):
        try:
            date = parsedate_to_datetime(d)
            if date.tzinfo is None:  # "-0000": UTC, with no zone said
                date = date.replace(tzinfo=timezone.utc)
        except (TypeError, ValueError):
            date = None
    body: Any = None
    if raw:
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
    if 200 <= resp.status < 300:
        return Response(resp.status, body, date)
    code, message = "", ""
    task_id: str | None = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        code = str(body["error"].get("code") or "")
        message = str(body["error"].get("message") or "")
        if isinstance(body["error"].get("task_id"), str) and body["error"]["task_id"]:
            task_id = body["error"]["task_id"]
    if not code:
        code = {502: "unavailable", 503: "unavailable", 504: "unavailable"}.get(resp.status, f"http_{resp.status}")
        message = raw[:200].decode(errors="replace").strip() or resp.reason
    retry_after: float | None = None
    if ra := resp.getheader("Retry-After"):
        try:
            retry_after = float(ra)
        except ValueError:
            retry_after = None
    err: APIError = error_for(resp.status, code, f"{message} ({method} {path})", retry_after=retry_after,
                              task_id=task_id)
    err.message = message
    raise err
