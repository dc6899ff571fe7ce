"""Batch heartbeats (POST /workers/heartbeat/batch) against a stand-in server, since
a replica without the endpoint makes the worker fall back to one heartbeat per task
(which the tests against the real replica cover)."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import taskforge

TASK = "0190a4a0-0000-7000-8000-000000000001"


class FakeServer:
    """Hands out one task, extends its lease by batch heartbeats (asking to cancel
    on the second round), and records what the worker sent."""

    def __init__(self) -> None:
        self.batches: list[dict[str, Any]] = []
        self.nacks: list[dict[str, Any]] = []
        self.handed = False
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                now = datetime.now(timezone.utc)
                lease = (now + timedelta(seconds=2)).isoformat()
                out: Any
                if self.path == "/workers/poll":
                    if fake.handed:
                        time.sleep(min(body.get("wait_ms", 0) / 1000, 0.2))
                        out = {"tasks": []}
                    else:
                        fake.handed = True
                        out = {"tasks": [{"id": TASK, "queue": "q", "payload": None, "priority": 5, "attempt": 1,
                                          "lease_token": "tok", "lease_expires_at": lease,
                                          "heartbeat_interval_ms": 200, "timeout_seconds": None,
                                          "traceparent": None}]}
                elif self.path == "/workers/heartbeat/batch":
                    fake.batches.append(body)
                    out = {"leases": [{"task_id": x["task_id"], "lease_expires_at": lease,
                                       "cancel_requested": len(fake.batches) >= 2} for x in body["leases"]]}
                elif self.path == "/workers/nack":
                    fake.nacks.append(body)
                    out = {"id": TASK, "queue": "q", "status": "cancelled"}
                else:
                    self.send_error(404)
                    return
                data = json.dumps(out).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Date", format_datetime(now, usegmt=True))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_batch_heartbeats_extend_leases_and_carry_cancellation() -> None:
    fake = FakeServer()
    try:
        reasons: list[Any] = []

        def handler(job: taskforge.Job) -> Any:
            job.wait(10)
            reasons.append(job.stop_reason)
            job.raise_if_stopping()

        w = taskforge.Worker(fake.url, poll_wait=0.2, shutdown_grace=0.5)
        w.handle("q", handler)
        t = threading.Thread(target=w.run, kwargs={"handle_signals": False}, daemon=True)
        t.start()
        deadline = time.monotonic() + 10
        while not fake.nacks and time.monotonic() < deadline:
            time.sleep(0.05)
        w.stop()
        t.join(10)
        assert isinstance(reasons[0], taskforge.TaskCancelled)
        assert len(fake.batches) >= 2
        assert fake.batches[0] == {"worker_id": w.id, "leases": [{"task_id": TASK, "lease_token": "tok"}]}
        assert fake.nacks[0]["error"] == "cancelled while executing"
    finally:
        fake.close()
