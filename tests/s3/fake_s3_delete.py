#!/usr/bin/env python3
"""fake_s3_delete.py — an HTTP server on 127.0.0.1 that answers S3
DeleteObjects (POST ?delete) the way AWS documents it, with the per-key
failures that s3rver and Ceph RGW never give on demand (AWS S3 API
Reference, DeleteObjects: a 200 <DeleteResult> whose <Error> entries carry
Key, Code and Message; Content-MD5 or a checksum header is required):

    fake_s3_delete.py --log FILE [--no-batch]

  * a key containing "deny" fails with AccessDenied, one containing "busy"
    with InternalError (every time), "gone" with NoSuchKey; the rest are
    deleted. Quiet mode answers only the failures.
  * a missing or wrong Content-MD5 is a 400 InvalidDigest / BadDigest.
  * --no-batch: POST ?delete is a 501 NotImplemented (a store without
    DeleteObjects); DELETE of one key is a 204 either way.

Appends one line per request to FILE: "POST n=KEYS" or "DELETE /path" (no
header value, so no credential, reaches the log). Prints the port on stdout
once it listens. Runs until killed (SIGTERM).
"""
import argparse
import base64
import hashlib
import http.server
import socketserver
import sys
import xml.etree.ElementTree as ET


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--log", required=True)
    ap.add_argument("--no-batch", action="store_true")
    a = ap.parse_args()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def note(self, line):
            with open(a.log, "a") as f:
                f.write(line + "\n")

        def answer(self, status, body=b""):
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            if body:
                self.send_header("Content-Type", "application/xml")
            self.end_headers()
            self.wfile.write(body)

        def error(self, status, code):
            self.answer(status, ("<?xml version=\"1.0\"?><Error><Code>%s</Code><Message>%s"
                                 "</Message></Error>" % (code, code)).encode())

        def do_DELETE(self):
            self.note("DELETE " + self.path)
            self.answer(204)

        def do_POST(self):
            n = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(n)
            if a.no_batch:
                self.note("POST refused")
                return self.error(501, "NotImplemented")
            md5 = self.headers.get("Content-MD5")
            if not md5:
                self.note("POST no-md5")
                return self.error(400, "InvalidDigest")
            if base64.b64decode(md5) != hashlib.md5(body).digest():
                self.note("POST bad-md5")
                return self.error(400, "BadDigest")
            ns = "{http://s3.amazonaws.com/doc/2006-03-01/}"
            root = ET.fromstring(body)
            keys = [o.findtext(ns + "Key") for o in root.iter(ns + "Object")]
            quiet = root.findtext(ns + "Quiet") == "true"
            self.note("POST n=%d quiet=%d" % (len(keys), quiet))
            out = ["<?xml version=\"1.0\" encoding=\"UTF-8\"?><DeleteResult "
                   "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"]
            for k in keys:
                code = ("AccessDenied" if "deny" in k else "InternalError" if "busy" in k
                        else "NoSuchKey" if "gone" in k else None)
                if code:
                    out.append("<Error><Key>%s</Key><Code>%s</Code><Message>%s for %s"
                               "</Message></Error>" % (k, code, code, k))
                elif not quiet:
                    out.append("<Deleted><Key>%s</Key></Deleted>" % k)
            out.append("</DeleteResult>")
            self.answer(200, "".join(out).encode())

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True

    srv = Server(("127.0.0.1", 0), Handler)
    print(srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
