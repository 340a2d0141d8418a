#!/usr/bin/env python3
"""The stack's stand-in for Slack, Microsoft Teams and PagerDuty (component `hooks`): an HTTPS
server (the stack's test certificate) that checks each POST body against the service's published
payload shape, answers the way the service does, and records it for tests to read back.

  POST /slack/<anything>       Slack incoming webhook: `text` and/or `blocks` (Block Kit: at most
                               50 blocks of known types, header plain_text <= 150 chars, section
                               text <= 3000, context <= 10 elements). 200 "ok" | 400 invalid_blocks.
  POST /teams/<anything>       Teams workflow webhook: {"type": "message", "attachments": [{
                               "contentType": "application/vnd.microsoft.card.adaptive",
                               "content": {"type": "AdaptiveCard", "version", "body": [...]}}]}.
                               202 | 400.
  POST /pagerduty/<anything>   PagerDuty Events API v2: routing_key (32 chars), event_action
                               trigger|acknowledge|resolve, dedup_key (<= 255; required unless
                               trigger), payload.summary (<= 1024)/source/severity
                               (critical|error|warning|info) for trigger. 202 {status: success,
                               dedup_key} | 400 {status: "invalid event", errors}.
  POST /control/fail           {"path": P, "status": 500, "times": N}: the next N requests to
                               path P answer that status (and are recorded as such).
  GET  /received?prefix=P      [{path, at, status, valid, errors, body}] of requests whose path
                               starts with P, oldest first.

Usage: alert-receiver.py HOST PORT CERT KEY
"""
import json
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

host, port, cert, key = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
lock = threading.Lock()
received = []  # bounded below
failures = {}  # path -> [status, times]

SLACK_BLOCKS = {"section", "header", "context", "divider", "actions", "image", "rich_text", "input", "file", "video"}
TEXT_TYPES = {"plain_text", "mrkdwn"}


def slack_errors(b):
    errs = []
    if not isinstance(b, dict):
        return ["the body is not a JSON object"]
    text, blocks = b.get("text"), b.get("blocks")
    if not (isinstance(text, str) and text) and not blocks:
        errs.append("no_text: text or blocks is required")
    if text is not None and not isinstance(text, str):
        errs.append("text must be a string")
    if blocks is not None:
        if not isinstance(blocks, list) or len(blocks) > 50:
            return errs + ["invalid_blocks: blocks must be a list of at most 50"]
        for i, bl in enumerate(blocks):
            t = bl.get("type") if isinstance(bl, dict) else None
            if t not in SLACK_BLOCKS:
                errs.append(f"invalid_blocks: blocks[{i}].type {t!r}")
            elif t == "header":
                tx = bl.get("text") or {}
                if tx.get("type") != "plain_text" or not tx.get("text") or len(tx["text"]) > 150:
                    errs.append(f"invalid_blocks: blocks[{i}] header text must be plain_text of 1-150 chars")
            elif t == "section":
                tx = bl.get("text")
                if tx is None and not bl.get("fields"):
                    errs.append(f"invalid_blocks: blocks[{i}] section needs text or fields")
                elif tx is not None and (tx.get("type") not in TEXT_TYPES or not tx.get("text") or len(tx["text"]) > 3000):
                    errs.append(f"invalid_blocks: blocks[{i}] section text must be a text object of 1-3000 chars")
            elif t == "context":
                el = bl.get("elements")
                if not isinstance(el, list) or not 1 <= len(el) <= 10:
                    errs.append(f"invalid_blocks: blocks[{i}] context needs 1-10 elements")
                else:
                    for e in el:
                        if e.get("type") not in TEXT_TYPES | {"image"}:
                            errs.append(f"invalid_blocks: blocks[{i}] context element type {e.get('type')!r}")
    return errs


def teams_errors(b):
    if not isinstance(b, dict) or b.get("type") != "message":
        return ['type must be "message"']
    atts = b.get("attachments")
    if not isinstance(atts, list) or not atts:
        return ["attachments must be a non-empty list"]
    errs = []
    for i, a in enumerate(atts):
        if a.get("contentType") != "application/vnd.microsoft.card.adaptive":
            errs.append(f"attachments[{i}].contentType must be application/vnd.microsoft.card.adaptive")
        c = a.get("content") or {}
        if c.get("type") != "AdaptiveCard":
            errs.append(f'attachments[{i}].content.type must be "AdaptiveCard"')
        if not isinstance(c.get("version"), str):
            errs.append(f"attachments[{i}].content.version is required")
        body = c.get("body")
        if not isinstance(body, list) or not body:
            errs.append(f"attachments[{i}].content.body must be a non-empty list")
        else:
            for j, el in enumerate(body):
                if not isinstance(el, dict) or not isinstance(el.get("type"), str):
                    errs.append(f"attachments[{i}].content.body[{j}].type is required")
                elif el["type"] == "TextBlock" and not isinstance(el.get("text"), str):
                    errs.append(f"attachments[{i}].content.body[{j}] TextBlock needs text")
    return errs


def pagerduty_errors(b):
    if not isinstance(b, dict):
        return ["the body is not a JSON object"]
    errs = []
    rk = b.get("routing_key")
    if not isinstance(rk, str) or len(rk) != 32:
        errs.append("'routing_key' must be 32 characters")
    action = b.get("event_action")
    if action not in ("trigger", "acknowledge", "resolve"):
        errs.append("'event_action' must be trigger, acknowledge or resolve")
    dk = b.get("dedup_key")
    if dk is not None and (not isinstance(dk, str) or len(dk) > 255):
        errs.append("'dedup_key' must be a string of at most 255 characters")
    if action in ("acknowledge", "resolve") and not dk:
        errs.append("'dedup_key' is required for acknowledge and resolve")
    if action == "trigger":
        p = b.get("payload")
        if not isinstance(p, dict):
            errs.append("'payload' is required for trigger")
        else:
            s = p.get("summary")
            if not isinstance(s, str) or not s or len(s) > 1024:
                errs.append("'payload.summary' is required (at most 1024 characters)")
            if not isinstance(p.get("source"), str) or not p.get("source"):
                errs.append("'payload.source' is required")
            if p.get("severity") not in ("critical", "error", "warning", "info"):
                errs.append("'payload.severity' must be critical, error, warning or info")
    return errs


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stdout.write("hooks: " + (fmt % args) + "\n")
        sys.stdout.flush()

    def answer(self, status, body, ctype="application/json"):
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        u = urlparse(self.path)
        if u.path == "/healthz":
            return self.answer(200, "ok", "text/plain")
        if u.path == "/received":
            prefix = parse_qs(u.query).get("prefix", ["/"])[0]
            with lock:
                items = [r for r in received if r["path"].startswith(prefix)]
            return self.answer(200, items)
        self.answer(404, {"error": "not found"})

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n)
        path = urlparse(self.path).path
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            body = None
        if path == "/control/fail":
            with lock:
                failures[body["path"]] = [int(body.get("status", 500)), int(body.get("times", 1))]
            return self.answer(200, {"ok": True})
        if path.startswith("/slack/"):
            errs, ok = slack_errors(body), (200, "ok")
            bad = (400, "invalid_blocks")
            ctype = "text/plain"
        elif path.startswith("/teams/"):
            errs, ok, bad, ctype = teams_errors(body), (202, ""), (400, "invalid adaptive card message"), "text/plain"
        elif path.startswith("/pagerduty/"):
            errs = pagerduty_errors(body)
            ok = (202, {"status": "success", "message": "Event processed", "dedup_key": (body or {}).get("dedup_key")})
            bad = (400, {"status": "invalid event", "message": "Event object is invalid", "errors": errs})
            ctype = "application/json"
        else:
            return self.answer(404, {"error": "unknown service path"})
        with lock:
            forced = failures.get(path)
            if forced and forced[1] > 0:
                forced[1] -= 1
                status, reply = forced[0], {"error": "forced failure"}
                ctype = "application/json"
            else:
                status, reply = ok if not errs else bad
            received.append({"path": path, "at": time.time(), "status": status, "valid": not errs, "errors": errs, "body": body})
            del received[:-20000]
        self.answer(status, reply, ctype)


server = ThreadingHTTPServer((host, port), Handler)
server.daemon_threads = True
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
server.socket = ctx.wrap_socket(server.socket, server_side=True)
print(f"hooks: https://{host}:{port}", flush=True)
server.serve_forever()
