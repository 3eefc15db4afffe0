#!/usr/bin/env python3
"""A stateful actor in Python: notes kept in memory, or in a durable volume.

By default its state lives in the interpreter's heap, so a restored
checkpoint still has every note while a cold boot starts empty. With
$NOTES_DIR set (a template's durable volume, e.g. /data), every note is a
file there, read on every request: the notes survive anything that keeps
the volume, such as a move to another template (docs/actors.md), while the
memo, always in memory, does not.

    POST /notes        body = note text  -> 201 {"id": N, "text": "..."}
    GET  /notes        -> [{"id": 1, "text": "..."}, ...] in insertion order
    GET  /notes/N      -> {"id": N, "text": "..."} or 404
    PUT  /memo         body = text       -> 204; kept in memory only
    GET  /memo         -> the memo's text ("" when none)
    GET  /healthz      -> "ok" (the wakeup probe)
    GET  /checksum     -> {"mb": N, "sha256": "..."} of the ballast (below)

With $STATE_MB set to N > 0 the process holds N MiB of live state at start:
a dict of 1 KiB random strings (the "ballast"), so a benchmark can measure
what a checkpoint of an interpreter with tens to hundreds of MB of heap
costs. /checksum hashes the ballast in key order, so a restore that lost or
corrupted any page of it answers a different digest.

Listens on 0.0.0.0:$PORT (default 8080). Standard library only.
"""

import hashlib
import json
import os
import random
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


class DirNotes:
    """Notes as files <id>.txt in a directory; ids are never reused."""

    def __init__(self, path):
        self._lock = threading.Lock()
        self._dir = path
        os.makedirs(path, exist_ok=True)

    def _ids(self):
        ids = []
        for name in os.listdir(self._dir):
            if name.endswith(".txt") and name[:-4].isdigit():
                ids.append(int(name[:-4]))
        return sorted(ids)

    def _path(self, note_id):
        return os.path.join(self._dir, "%d.txt" % note_id)

    def add(self, text):
        with self._lock:
            ids = self._ids()
            note_id = (ids[-1] if ids else 0) + 1
            tmp = os.path.join(self._dir, ".tmp")
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.rename(tmp, self._path(note_id))
            return {"id": note_id, "text": text}

    def get(self, note_id):
        try:
            with open(self._path(note_id), encoding="utf-8") as f:
                return {"id": note_id, "text": f.read()}
        except FileNotFoundError:
            return None

    def all(self):
        with self._lock:
            return [self.get(i) for i in self._ids()]


def make_ballast(mb):
    """mb MiB of distinct 1 KiB strings keyed by index: random (seeded once
    from the OS), so neither zero-page exclusion nor compression can make
    them cheap, and made without a system call per string."""
    rnd = random.Random()
    return {i: rnd.randbytes(512).hex() for i in range(mb * 1024)}


def checksum(ballast):
    h = hashlib.sha256()
    for i in range(len(ballast)):
        h.update(ballast[i].encode())
    return h.hexdigest()


STATE_MB = int(os.environ.get("STATE_MB", "0") or "0")
BALLAST = make_ballast(STATE_MB)

NOTES = DirNotes(os.environ["NOTES_DIR"]) if os.environ.get("NOTES_DIR") else Notes()
# MEMO is in memory only, whichever store holds the notes.
MEMO = [""]


class Handler(BaseHTTPRequestHandler):
    server_version = "notes/1"
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.path == "/healthz":
            return self._send(200, b"ok\n", "text/plain; charset=utf-8")
        if self.path == "/notes":
            return self._json(200, NOTES.all())
        if self.path == "/checksum":
            return self._json(200, {"mb": STATE_MB, "sha256": checksum(BALLAST)})
        if self.path == "/memo":
            return self._send(200, MEMO[0].encode(), "text/plain; charset=utf-8")
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

    def do_PUT(self):
        if self.path != "/memo":
            return self._json(404, {"error": "not found"})
        text = self._body()
        if text is None:
            return None
        MEMO[0] = text
        return self._send(204, b"", "text/plain; charset=utf-8")

    def do_POST(self):
        if self.path != "/notes":
            return self._json(404, {"error": "not found"})
        text = self._body()
        if text is None:
            return None
        note = NOTES.add(text)
        return self._json(201, note, {"Location": "/notes/%d" % note["id"]})

    def _body(self):
        """The request body as text, or None after answering an error."""
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            self._json(400, {"error": "bad Content-Length"})
            return None
        if length > MAX_BODY:
            self._json(413, {"error": "body larger than %d bytes" % MAX_BODY})
            return None
        return self.rfile.read(length).decode("utf-8", errors="replace")

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
