#!/usr/bin/env python3
"""fake_s3_error.py — an HTTP(S) server on 127.0.0.1 that answers every
request with one S3 error, for the error tests of refusals that s3rver and
Ceph RGW never give (they accept any region, ignore session tokens):

    fake_s3_error.py --code ExpiredToken --status 400 [--cert PEM --key PEM] [--log FILE]

The answer is what AWS S3 sends (AWS S3 API Reference, "Error responses":
AuthorizationHeaderMalformed and ExpiredToken are 400, AccessDenied 403), an
XML <Error> body with Code and Message. Prints the port on stdout once it
listens. With --log, appends one line per request: the method, the path and
the SignedHeaders of its Authorization header (names only: never a header
value, so no credential reaches the log). Runs until killed (SIGTERM).
"""
import argparse
import http.server
import re
import socketserver
import ssl
import sys

MESSAGES = {
    "AuthorizationHeaderMalformed":
        "The authorization header is malformed; the region 'us-east-1' is wrong; "
        "expecting 'eu-central-1'",
    "ExpiredToken": "The provided token has expired.",
    "AccessDenied": "Access Denied",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--code", required=True)
    ap.add_argument("--status", type=int, required=True)
    ap.add_argument("--cert")
    ap.add_argument("--key")
    ap.add_argument("--log")
    a = ap.parse_args()
    body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code>"
            "<Message>%s</Message><RequestId>0</RequestId></Error>"
            % (a.code, MESSAGES.get(a.code, a.code))).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def answer(self):
            n = int(self.headers.get("Content-Length") or 0)
            if n:
                self.rfile.read(n)
            if a.log:
                m = re.search(r"SignedHeaders=([a-z0-9;-]+)", self.headers.get("Authorization", ""))
                with open(a.log, "a") as f:
                    f.write("%s %s signed=%s\n" % (self.command, self.path.split("?")[0],
                                                   m.group(1) if m else ""))
            self.send_response(a.status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_PUT = do_DELETE = do_HEAD = do_POST = answer

        def log_message(self, *args):
            pass

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True
        allow_reuse_address = True

    srv = Server(("127.0.0.1", 0), Handler)
    if a.cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.cert, a.key)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    print(srv.server_address[1], flush=True)
    sys.stdout.close()
    srv.serve_forever()


if __name__ == "__main__":
    main()
