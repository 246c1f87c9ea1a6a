"""s3check.py - the store's own word on what it holds, for the peer benchmark
(tests/bench/peers): SigV4-signed HEAD, ListObjectsV2 and DELETE straight to
the S3 server (not through the counting proxy, so checks are not counted as
a tool's requests). Standard library only: Debian's /usr/bin/python3 has no
botocore. The key pair comes from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY
in the environment, never from argv.

SigV4 as in AWS's "Signature Version 4 signing process" (restated in
docs/BENCHMARKS.md, "Peers"): canonical request, string to sign, HMAC chain
date/region/service/aws4_request; payload UNSIGNED-PAYLOAD (s3rver and RGW
accept it).
"""
import datetime
import hashlib
import hmac
import http.client
import os
import re
import urllib.parse
import xml.etree.ElementTree as ET

REGION = "us-east-1"


class Store:
    def __init__(self, endpoint, bucket):
        u = urllib.parse.urlparse(endpoint)
        self.host, self.port = u.hostname, u.port or 80
        self.bucket = bucket
        self.key = os.environ["AWS_ACCESS_KEY_ID"]
        self.secret = os.environ["AWS_SECRET_ACCESS_KEY"]

    def _request(self, method, key="", query=None):
        path = "/" + self.bucket + ("/" + urllib.parse.quote(key, safe="/-_.~") if key else "")
        qs = "&".join("%s=%s" % (urllib.parse.quote(k, safe="-_.~"),
                                 urllib.parse.quote(str(v), safe="-_.~"))
                      for k, v in sorted((query or {}).items()))
        now = datetime.datetime.now(datetime.timezone.utc)
        amzdate, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        host = "%s:%d" % (self.host, self.port)
        headers = {"host": host, "x-amz-content-sha256": "UNSIGNED-PAYLOAD",
                   "x-amz-date": amzdate}
        signed = ";".join(sorted(headers))
        canon = "\n".join([method, path, qs,
                           "".join("%s:%s\n" % (k, headers[k]) for k in sorted(headers)),
                           signed, "UNSIGNED-PAYLOAD"])
        scope = "%s/%s/s3/aws4_request" % (day, REGION)
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amzdate, scope,
                             hashlib.sha256(canon.encode()).hexdigest()])
        k = ("AWS4" + self.secret).encode()
        for part in (day, REGION, "s3", "aws4_request"):
            k = hmac.new(k, part.encode(), hashlib.sha256).digest()
        sig = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
        headers["authorization"] = ("AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, "
                                    "Signature=%s" % (self.key, scope, signed, sig))
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            conn.request(method, path + ("?" + qs if qs else ""), headers=headers)
            resp = conn.getresponse()
            return resp.status, dict(resp.getheaders()), resp.read()
        finally:
            conn.close()

    def size(self, key):
        """The object's size, or None when the store has no such object."""
        status, headers, _ = self._request("HEAD", key)
        if status == 404:
            return None
        if status != 200:
            raise IOError("HEAD %s: HTTP %d" % (key, status))
        return int({k.lower(): v for k, v in headers.items()}["content-length"])

    def list(self, prefix):
        """{key: size} of every object under prefix (ListObjectsV2, paged)."""
        out, token = {}, None
        while True:
            q = {"list-type": 2, "prefix": prefix, "max-keys": 1000}
            if token:
                q["continuation-token"] = token
            status, _, body = self._request("GET", query=q)
            if status != 200:
                raise IOError("list %s: HTTP %d %s" % (prefix, status, body[:200]))
            xml = re.sub(rb' xmlns="[^"]*"', b"", body, count=1)
            root = ET.fromstring(xml)
            for c in root.findall("Contents"):
                out[c.findtext("Key")] = int(c.findtext("Size"))
            if root.findtext("IsTruncated") != "true":
                return out
            token = root.findtext("NextContinuationToken")

    def delete_prefix(self, prefix):
        """Deletes every object under prefix (one DELETE each: libs3-era
        servers and s3rver's multi-delete quirks need no special case)."""
        for key in self.list(prefix):
            status, _, _ = self._request("DELETE", key)
            if status not in (200, 204, 404):
                raise IOError("DELETE %s: HTTP %d" % (key, status))
