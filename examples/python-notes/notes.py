#!/usr/bin/env python3
"""A stateful actor in Python: notes kept only in memory.

Its state lives in the interpreter's heap, so a restored checkpoint still has
every note while a cold boot starts empty.

    POST /notes        body = note text  -> 201 {"id": N, "text": "..."}
    GET  /notes        -> [{"id": 1, "text": "..."}, ...] in insertion order
    GET  /notes/N      -> {"id": N, "text": "..."} or 404
    GET  /healthz      -> "ok" (the wakeup probe)

Listens on 0.0.0.0:$PORT (default 8080). Standard library only.
"""

import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Bodies above this are refused: notes are short, and memory is the state
# that every checkpoint carries.
MAX_BODY = 1 << 20


class Notes:
    """Thread-safe note store; ids start at 1 and are never reused."""

    def __init__(self):
        self._lock = threading.Lock()
        self._notes = {}  # id -> text; dicts keep insertion order
        self._next = 1

    def add(self, text):
        with self._lock:
            note = {"id": self._next, "text": text}
            self._notes[self._next] = text
            self._next += 1
            return note

    def get(self, note_id):
        with self._lock:
            text = self._notes.get(note_id)
        return None if text is None else {"id": note_id, "text": text}

    def all(self):
        with self._lock:
            return [{"id": i, "text": t} for i, t in self._notes.items()]


NOTES = Notes()


class Handler(BaseHTTPRequestHandler):
    server_version = "notes/1"
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.path == "/healthz":
            return self._send(200, b"ok\n", "text/plain; charset=utf-8")
        if self.path == "/notes":
            return self._json(200, NOTES.all())
        if self.path.startswith("/notes/"):
            try:
                note_id = int(self.path[len("/notes/"):])
            except ValueError:
                return self._json(400, {"error": "note id must be an integer"})
            note = NOTES.get(note_id)
            if note is None:
                return self._json(404, {"error": "no note %d" % note_id})
            return self._json(200, note)
        return self._json(404, {"error": "not found"})

    def do_POST(self):
        if self.path != "/notes":
            return self._json(404, {"error": "not found"})
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            return self._json(400, {"error": "bad Content-Length"})
        if length > MAX_BODY:
            return self._json(413, {"error": "note larger than %d bytes" % MAX_BODY})
        text = self.rfile.read(length).decode("utf-8", errors="replace")
        note = NOTES.add(text)
        return self._json(201, note, {"Location": "/notes/%d" % note["id"]})

    def _json(self, status, obj, headers=None):
        self._send(status, json.dumps(obj).encode() + b"\n", "application/json", headers)

    def _send(self, status, body, content_type, headers=None):
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):
        # Probes arrive on every wakeup; logging them would drown the rest.
        if self.path != "/healthz":
            sys.stderr.write("%s %s\n" % (self.address_string(), fmt % args))


class Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # A connection that was open at checkpoint time is gone after a
        # restore (its peer never moved with it); that is expected, not
        # worth a traceback.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def main():
    port = int(os.environ.get("PORT", "8080"))
    server = Server(("0.0.0.0", port), Handler)
    server.daemon_threads = True

    def stop(signum, frame):
        # serve_forever runs in this (main) thread, so shutdown() would
        # deadlock here; unwind it with an exception instead.
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    print("notes listening on 0.0.0.0:%d" % port, file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        print("notes stopped", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
