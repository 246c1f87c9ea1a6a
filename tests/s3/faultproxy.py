#!/usr/bin/env python3
"""faultproxy.py - an HTTP/1.1-aware TCP proxy that injects faults between an
S3 client and an S3 server (s3rver), one decision per request.

    faultproxy.py --target-port P [--listen-port 0] --port-file F --pid-file F
                  [--stats-file F] [--stats-interval S] [--request-log F] [--seed N]
                  [--stall-s S] [--owner-pid PID] [--rate-mbps N]
                  [--faults e500=0.03,e503=0.03,drop_req=0.03,drop_resp=0.03,cut_body=0.03,stall=0.003]
                  [--fault-match REGEX ... [--fault-max N]]

It parses request and response framing (Content-Length, chunked, HEAD/1xx/
204/304), so with keep-alive connections every request, not only the first on
a connection, can be hit. Faults, each with its probability per request:

    e500       answer 500 InternalError (S3 XML body) without asking the server
    e503       answer 503 SlowDown without asking the server
    drop_req   close the client connection after reading the request head:
               the server never sees the request, the client gets no reply
    drop_resp  forward the request, then close after half of the final
               response (head or body; an interim 100 Continue passes, so a
               PUT's body reaches the server): the server did the work, the
               reply is cut
    cut_body   forward half of a request body to the server, then reset both
               connections (an upload cut mid-way; requests with a body only)
    stall      hold the request for --stall-s seconds, answering nothing,
               then close: a hung server as the client sees it
    flip_body  forward the request with one bit of its body flipped (the byte
               in the middle, XOR 0x01; requests with a body only) and pass
               the server's answer on: a body corrupted in transit, which a
               server that checks the signed payload hash or Content-MD5
               refuses. Its answers are counted by what they say:
               flip_body_answer_<S3 error code>, or _<HTTP status> without one

--fault-match REGEX (repeatable) lets faults hit only requests whose
request line ("PUT /bucket/key HTTP/1.1") matches one of the expressions
(re.search), and --fault-max N (default: no limit) only the first N
requests matching each expression: `--faults drop_resp=1 --fault-match
'^PUT .*/packs/' --fault-max 1` loses the answer to the first pack PUT and
to nothing else, whatever the seed.

Every fault closes the connection it hit. Counts go to --stats-file (JSON) on
SIGTERM/SIGINT and every --stats-interval seconds (default 1; the peer
benchmark waits for a dump after each run, so it asks for 0.05): requests, faults, requests per method
(method_PUT, ...), request and passed response body bytes (bytes_up,
bytes_down). With no --faults it is a counting proxy; a response with a
body over 1 MiB that no fault hits is streamed, not held. The proxy listens on 127.0.0.1 only and is
stopped by PID (the caller's trap). The seed makes a run reproducible up to
thread timing. --rate-mbps N (default 0: no limit) caps the bytes forwarded
per second at N MB/s (10^6 bytes) in each direction, shared by every
connection (one token bucket per direction, a burst of 50 ms): the store
stands behind a slow link, as a cloud link shared by a node. It paces the
request and response bodies and the heads of answers; fault decisions are
unchanged. --request-log appends one line per answered request: the
monotonic clock (CLOCK_MONOTONIC, s) at the request and at the end of its answer, the
method, the path and query (never a header: no credentials), the status,
and the bytes of the answer's body.
"""
import argparse
import asyncio
import json
import os
import random
import re
import signal
import socket
import struct
import sys
import time

FAULTS = ("e500", "e503", "drop_req", "drop_resp", "cut_body", "stall", "flip_body")


class Stats:
    def __init__(self):
        self.counts = {"requests": 0, "passed": 0, "connections": 0}
        for f in FAULTS:
            self.counts[f] = 0
        self.counts["bytes_up"] = self.counts["bytes_down"] = 0

    def count_request(self, method, body_len):
        """Per-method counts (method_PUT, ...) and request body bytes: what
        the peer benchmark (tests/bench/peers) counts at the server's door."""
        key = "method_" + method
        self.counts[key] = self.counts.get(key, 0) + 1
        self.counts["bytes_up"] += body_len

    def dump(self, path):
        if not path:
            return
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(self.counts, fh, indent=1, sort_keys=True)
        os.replace(tmp, path)


class Bucket:
    """A token bucket of `rate` bytes/s for one direction, shared by all
    connections: each take(n) books n bytes on a virtual clock and sleeps
    until that clock is due (at most 50 ms of unused time is credited)."""
    BURST_S = 0.05

    def __init__(self, rate):
        self.rate = float(rate)
        self.due = time.monotonic()

    async def take(self, n):
        now = time.monotonic()
        self.due = max(self.due, now - self.BURST_S) + n / self.rate
        if self.due > now:
            await asyncio.sleep(self.due - now)


class Closed(Exception):
    pass


async def read_head(reader):
    """One HTTP message head (up to the blank line), or None at a clean EOF."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if e.partial:
            raise Closed()
        return None
    except (asyncio.LimitOverrunError, ConnectionError):
        raise Closed()
    return head


def parse_headers(head):
    lines = head.decode("latin-1").split("\r\n")
    first = lines[0]
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return first, headers


async def copy_exact(reader, writer, n, limit=None, bucket=None):
    """Copies n bytes; with limit, stops after that many and returns False;
    with a bucket (--rate-mbps), paced by it in 256 KiB pieces."""
    sent = 0
    while sent < n:
        want = min(1 << 18 if bucket else 1 << 20, n - sent)
        if limit is not None:
            want = min(want, limit - sent)
            if want <= 0:
                return False
        chunk = await reader.read(want)
        if not chunk:
            raise Closed()
        if bucket:
            await bucket.take(len(chunk))
        writer.write(chunk)
        await writer.drain()
        sent += len(chunk)
    return True


async def read_body(reader, headers, method, status):
    """The bytes of one response body (after its head), framed per RFC 7230."""
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        return b""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        out = bytearray()
        while True:
            line = await reader.readuntil(b"\r\n")
            out += line
            size = int(line.split(b";")[0].strip(), 16)
            if size == 0:
                while True:  # trailers up to the blank line
                    t = await reader.readuntil(b"\r\n")
                    out += t
                    if t == b"\r\n":
                        return bytes(out)
            out += await reader.readexactly(size + 2)
    if "content-length" in headers:
        return await reader.readexactly(int(headers["content-length"]))
    return await reader.read()  # until the server closes


def streamable(headers, method):
    """A response worth streaming: a body of a known length over 1 MiB."""
    if method == "HEAD" or "chunked" in headers.get("transfer-encoding", "").lower():
        return False
    return int(headers.get("content-length", "0") or 0) > (1 << 20)


def reset(writer):
    """Closes with RST (SO_LINGER 0), as a crashed peer would."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.close()


def s3_error(status, code, message):
    body = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code><Message>%s</Message>'
            "<RequestId>faultproxy</RequestId></Error>" % (code, message)).encode()
    reason = {500: "Internal Server Error", 503: "Service Unavailable"}[status]
    head = ("HTTP/1.1 %d %s\r\nContent-Type: application/xml\r\nContent-Length: %d\r\n"
            "Connection: close\r\n\r\n" % (status, reason, len(body))).encode()
    return head + body


class Proxy:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.rates = {f: 0.0 for f in FAULTS}
        for item in filter(None, args.faults.split(",")):
            name, value = item.split("=")
            if name not in self.rates:
                sys.exit("faultproxy: unknown fault %r (known: %s)" % (name, ", ".join(FAULTS)))
            self.rates[name] = float(value)
        self.stats = Stats()
        self.matchers = [re.compile(m) for m in args.fault_match]
        self.match_hits = [0] * len(self.matchers)
        rate = args.rate_mbps * 1e6
        self.up = Bucket(rate) if rate > 0 else None
        self.down = Bucket(rate) if rate > 0 else None

    def targeted(self, first):
        """Whether a request may be hit: every one without --fault-match;
        else one matching an expression that has hit fewer than
        --fault-max requests (which it then counts)."""
        if not self.matchers:
            return True
        for i, rx in enumerate(self.matchers):
            if rx.search(first) and (self.args.fault_max is None
                                     or self.match_hits[i] < self.args.fault_max):
                self.match_hits[i] += 1
                return True
        return False

    def pick(self, has_body):
        r = self.rng.random()
        for f in FAULTS:
            rate = self.rates[f]
            if f in ("cut_body", "flip_body") and not has_body:
                continue
            if r < rate:
                return f
            r -= rate
        return None

    def log_request(self, first, status, started, body_bytes):
        """One line per answered request (--request-log): when it came and
        when its answer ended (CLOCK_MONOTONIC, comparable with other
        processes' clocks), and its body's size."""
        if not self.args.request_log:
            return
        method, target = (first.split(" ") + ["", ""])[:2]
        with open(self.args.request_log, "a") as f:
            f.write("%.4f %.4f %s %s %d %d\n" % (started, time.monotonic(),
                                                  method, target, status, body_bytes))

    async def handle(self, creader, cwriter):
        self.stats.counts["connections"] += 1
        ureader = uwriter = None
        try:
            while True:
                head = await read_head(creader)
                if head is None:
                    return
                first, headers = parse_headers(head)
                method = first.split(" ", 1)[0].upper()
                started = time.monotonic()
                body_len = int(headers.get("content-length", "0") or 0)
                if "chunked" in headers.get("transfer-encoding", "").lower():
                    sys.stderr.write("faultproxy: chunked requests are not supported\n")
                    return
                self.stats.counts["requests"] += 1
                self.stats.count_request(method, body_len)
                fault = self.pick(body_len > 0) if self.targeted(first) else None
                if fault:
                    self.stats.counts[fault] += 1
                if fault in ("e500", "e503"):
                    status, code, msg = ((500, "InternalError", "injected by faultproxy")
                                         if fault == "e500" else
                                         (503, "SlowDown", "injected by faultproxy"))
                    cwriter.write(s3_error(status, code, msg))
                    await cwriter.drain()
                    return
                if fault == "drop_req":
                    reset(cwriter)
                    return
                if fault == "stall":
                    await asyncio.sleep(self.args.stall_s)
                    return

                if uwriter is None:
                    ureader, uwriter = await asyncio.open_connection("127.0.0.1",
                                                                     self.args.target_port)
                uwriter.write(head)
                await uwriter.drain()
                if fault == "cut_body":
                    # Half the body, then both connections reset. A client
                    # that waits for "100 Continue" (curl does, for every
                    # PUT) gets it from here, or it would wait 1 s for it.
                    if headers.get("expect", "").lower() == "100-continue":
                        cwriter.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                        await cwriter.drain()
                    await copy_exact(creader, uwriter, body_len, limit=body_len // 2)
                    reset(uwriter)
                    uwriter = None
                    reset(cwriter)
                    return

                async def send_body():
                    if fault != "flip_body":
                        await copy_exact(creader, uwriter, body_len, bucket=self.up)
                        return
                    half = body_len // 2
                    await copy_exact(creader, uwriter, half, bucket=self.up)
                    byte = await creader.readexactly(1)
                    uwriter.write(bytes([byte[0] ^ 0x01]))
                    await copy_exact(creader, uwriter, body_len - half - 1, bucket=self.up)

                body_task = asyncio.ensure_future(send_body())
                # Its failure (the client or server went away) is handled
                # below; never let asyncio report it as unretrieved.
                body_task.add_done_callback(lambda t: t.cancelled() or t.exception())
                whole_ready = False
                try:
                    # Interim 1xx answers (100 Continue) come before the final one.
                    while True:
                        rhead = await read_head(ureader)
                        if rhead is None:
                            raise Closed()
                        rfirst, rheaders = parse_headers(rhead)
                        status = int(rfirst.split(" ")[1])
                        if status >= 200 and fault is None and streamable(rheaders, method):
                            # A large body with a length goes on as it comes:
                            # buffering a 1 GiB GET would hold back its first byte.
                            await body_task
                            n = int(rheaders["content-length"])
                            cwriter.write(rhead)
                            await copy_exact(ureader, cwriter, n, bucket=self.down)
                            self.stats.counts["passed"] += 1
                            self.stats.counts["bytes_down"] += n
                            self.log_request(first, status, started, n)
                            break
                        rbody = await read_body(ureader, rheaders, method, status)
                        whole = rhead + rbody
                        # A 100 Continue passes also under drop_resp: the
                        # client sends its body only then, and the fault is
                        # that the server did the work and its answer is lost.
                        if status >= 200:
                            whole_ready = True
                            break
                        cwriter.write(whole)
                        await cwriter.drain()
                    if fault == "drop_resp":
                        cwriter.write(whole[: len(whole) // 2])
                        await cwriter.drain()
                        reset(cwriter)
                        return
                    await body_task
                except Closed:
                    body_task.cancel()
                    return
                if whole_ready and fault == "flip_body":
                    code = rbody.split(b"<Code>", 1)[-1].split(b"</Code>", 1)[0] \
                        if b"<Code>" in rbody else str(status).encode()
                    key = "flip_body_answer_" + code.decode("latin-1")[:64]
                    self.stats.counts[key] = self.stats.counts.get(key, 0) + 1
                if whole_ready:
                    if self.down:
                        await self.down.take(len(whole))
                    cwriter.write(whole)
                    await cwriter.drain()
                    self.stats.counts["passed"] += 1
                    self.stats.counts["bytes_down"] += len(rbody)
                    self.log_request(first, status, started, len(rbody))
                if rheaders.get("connection", "").lower() == "close":
                    return
        except (Closed, ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ValueError, IndexError, asyncio.CancelledError):
            return
        finally:
            for w in (cwriter, uwriter):
                if w is not None:
                    try:
                        w.close()
                    except Exception:
                        pass

    async def main(self):
        server = await asyncio.start_server(self.handle, "127.0.0.1", self.args.listen_port,
                                            limit=1 << 20)
        port = server.sockets[0].getsockname()[1]
        write_atomic(self.args.pid_file, "%d\n" % os.getpid())
        write_atomic(self.args.port_file, "%d\n" % port)
        loop = asyncio.get_running_loop()
        stop = loop.create_future()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))
        async with server:
            while not stop.done():
                self.stats.dump(self.args.stats_file)
                await asyncio.wait([stop], timeout=self.args.stats_interval)
                if self.args.owner_pid and not pid_alive(self.args.owner_pid):
                    break
        self.stats.dump(self.args.stats_file)


def pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def write_atomic(path, text):
    if not path:
        return
    with open(path + ".tmp", "w") as fh:
        fh.write(text)
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target-port", type=int, required=True)
    ap.add_argument("--listen-port", type=int, default=0)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--pid-file")
    ap.add_argument("--stats-file")
    ap.add_argument("--stats-interval", type=float, default=1.0)
    ap.add_argument("--request-log")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--stall-s", type=float, default=5.0)
    ap.add_argument("--faults", default="")
    ap.add_argument("--fault-match", action="append", default=[],
                    help="faults only for requests whose request line matches (repeatable)")
    ap.add_argument("--fault-max", type=int, default=None,
                    help="at most N faulted requests per --fault-match expression")
    ap.add_argument("--rate-mbps", type=float, default=0.0,
                    help="cap each direction at N MB/s, shared by all connections (0: no cap)")
    ap.add_argument("--owner-pid", type=int, default=0,
                    help="exit when this process is gone (a killed test leaves no proxy)")
    args = ap.parse_args()
    asyncio.run(Proxy(args).main())


if __name__ == "__main__":
    main()
