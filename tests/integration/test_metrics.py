"""Prometheus metrics of a real mount (docs/METRICS.md).

One ckptfs daemon with `--metrics-listen 127.0.0.1:PORT`. Both places the
metrics are served, MOUNT/.ckptfs/metrics and GET http://PORT/metrics, are
parsed with a real Prometheus text parser (Debian's python3-prometheus-client,
prometheus_client.parser), before and after a real torch.save into the mount
has become durable; the values must have moved: uploaded and stored bytes up,
PUTs up, the step counted durable. Then the port itself: another path is 404,
another method 405; and a second daemon asking for the same port, or for
0.0.0.0, refuses to start with a clear message and mounts nothing. Every
spelling of the wildcard (IPv4-mapped ::ffff:0.0.0.0, [0:0::0]) is refused
too, and ::ffff:127.0.0.1 is loopback.

Environment: CKPTFS and CKPTCTL name the binaries.
"""
import os
import socket
import sys
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mountlib import (CKPTCTL, CKPTFS, Mount, MountError, MountTestCase,  # noqa: E402
                      is_mounted, run_torch, wait_durable, wait_for)

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

JOB = "job-metrics"
SAVE = ("import torch, sys\n"
        "torch.manual_seed(0)\n"
        "torch.save({'w': torch.randn(256, 1024), 'step': 1}, sys.argv[1])\n")


def free_port():
    """A port nothing listens on now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse(text):
    """{(sample name, frozen labels): value} of Prometheus text; raises if it
    does not parse."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples, name, **labels):
    return samples[(name, tuple(sorted(labels.items())))]


def http_get(url, method="GET"):
    """(status, content type, body) of a request to url."""
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers.get("Content-Type"), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read().decode()


class MetricsTest(MountTestCase):
    TMP_PREFIX = "ckptfs-metrics-"

    def mount(self, name, listen):
        m = Mount(os.path.join(self.tmp, name), store=self.store,
                  staging=os.path.join(self.tmp, name + "-staging"), node="node-" + name,
                  binary=CKPTFS, extra_args=["--metrics-listen", listen])
        self.mounts.append(m)
        return m

    def read_file(self, m):
        with open(os.path.join(m.path, ".ckptfs", "metrics")) as f:
            return f.read()

    def test_metrics_move_and_port(self):
        port = free_port()
        url = "http://127.0.0.1:%d/metrics" % port
        m = self.mount("a", "127.0.0.1:%d" % port).start()
        # The port is served from just after the mount is live.
        wait_for(lambda: _answers(url), 10, "the metrics port answering")

        before_file = parse(self.read_file(m))
        status, ctype, body = http_get(url)
        self.assertEqual(status, 200)
        self.assertEqual(ctype, "text/plain; version=0.0.4; charset=utf-8")
        before_port = parse(body)
        self.assertEqual(set(before_file), set(before_port), "one renderer, one set of samples")
        self.assertEqual(value(before_file, "ckptfs_uploaded_bytes_total"), 0)
        self.assertEqual(value(before_file, "ckptfs_build_info", version="0.1.0"), 1)
        self.assertIn("metrics", os.listdir(os.path.join(m.path, ".ckptfs")))

        os.mkdir(os.path.join(m.path, JOB))
        ckpt = os.path.join(m.path, JOB, "ckpt-000001.pt")
        run_torch(SAVE, ckpt, timeout=300)
        size = os.path.getsize(ckpt)
        wait_durable(CKPTCTL, self.store, JOB, 1, timeout=120)
        # Durable in the store is published before the mount's own books
        # are updated: wait for the mount to count it.
        wait_for(lambda: value(parse(self.read_file(m)), "ckptfs_steps", job=JOB,
                               state="durable") == 1, 20, "step 1 counted durable")

        for where, text in (("file", self.read_file(m)), ("port", http_get(url)[2])):
            with self.subTest(where=where):
                after = parse(text)
                self.assertEqual(value(after, "ckptfs_uploaded_bytes_total"), size)
                self.assertGreater(value(after, "ckptfs_stored_bytes_total"), 0)
                self.assertGreater(value(after, "ckptfs_upload_new_bytes_total"), 0)
                self.assertGreater(value(after, "ckptfs_upload_seconds_total"), 0)
                self.assertEqual(value(after, "ckptfs_uploads_total", result="ok"), 1)
                self.assertGreater(value(after, "ckptfs_store_requests_total", kind="put",
                                         result="ok"),
                                   value(before_file, "ckptfs_store_requests_total",
                                         kind="put", result="ok"))
                self.assertEqual(value(after, "ckptfs_steps", job=JOB, state="durable"), 1)
                self.assertEqual(value(after, "ckptfs_steps", job=JOB, state="writing"), 0)
                self.assertEqual(value(after, "ckptfs_pending_bytes"), 0)
                self.assertEqual(value(after, "ckptfs_errors_total"), 0)

        # Only GET /metrics.
        self.assertEqual(http_get("http://127.0.0.1:%d/" % port)[0], 404)
        self.assertEqual(http_get("http://127.0.0.1:%d/metrics/x" % port)[0], 404)
        self.assertEqual(http_get(url, method="POST")[0], 405)
        self.assertEqual(http_get(url, method="HEAD")[0], 200)

        # A busy port: the second daemon says so and mounts nothing.
        self.assert_refused("b", "127.0.0.1:%d" % port, "Address already in use")
        # Every interface at once is refused (the metrics have no auth).
        self.assert_refused("c", "0.0.0.0:%d" % free_port(), "every interface")
        self.assert_refused("d", "127.0.0.1:99999", "port 1..65535")

        self.assertEqual(m.unmount(), 0)

    def test_listen_address_forms(self):
        # An address is judged by its binary form, whatever its spelling:
        # IPv4-mapped IPv6 addresses are their IPv4 address to a dual-stack
        # socket, so ::ffff:0.0.0.0 is every IPv4 interface (refused) and
        # ::ffff:127.0.0.1 loopback (served without the warning).
        for name, host in (("m1", "[::ffff:0.0.0.0]"), ("m2", "[0:0::0]"),
                           ("m3", "[::ffff:0:0]")):
            with self.subTest(host=host):
                self.assert_refused(name, "%s:%d" % (host, free_port()), "every interface")
        port = free_port()
        m = self.mount("l", "[::ffff:127.0.0.1]:%d" % port).start()
        wait_for(lambda: _answers("http://127.0.0.1:%d/metrics" % port), 10,
                 "the metrics port answering on 127.0.0.1")
        self.assertNotIn("not loopback", m.log_text())
        self.assertEqual(m.unmount(), 0)

    def assert_refused(self, name, listen, why):
        m = self.mount(name, listen)
        with self.assertRaises(MountError):
            m.start()
        self.assertEqual(m.returncode, 2)
        self.assertIn(why, m.log_text())
        self.assertFalse(is_mounted(m.path))


def _answers(url):
    try:
        return http_get(url)[0] == 200
    except OSError:
        return False


if __name__ == "__main__":
    unittest.main()
