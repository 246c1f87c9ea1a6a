"""S3 refusals give a clear, named error, exit code 3 from ckptctl and the
mount's status last_error, and no secret shows anywhere:

  * a wrong secret, against s3rver started strict (it verifies V4 header
    signatures with our patch, tests/s3/s3rver-3.7.1.patch);
  * a wrong region and an expired session token, against
    tests/s3/fake_s3_error.py, which answers as AWS does (s3rver and RGW
    accept any region and ignore tokens);
  * an untrusted certificate: the same fake server over TLS with a
    self-signed certificate, refused without --s3-ca-file and trusted with it.

Every credential here is a unique random string; each ckptctl output, the
mount's log, status file, staging files and command line are searched for
it. Servers and mounts are the test's own and are stopped by PID (mountlib
unmounts even on failure).

Environment: CKPTFS, CKPTCTL (binaries).
"""
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mountlib import Mount, tempdir  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
S3RVER_SH = os.path.join(HERE, "..", "s3", "s3rver.sh")
FAKE = os.path.join(HERE, "..", "s3", "fake_s3_error.py")
CKPTFS = os.environ.get("CKPTFS")
CKPTCTL = os.environ.get("CKPTCTL")
SECRET = "ckpt-secret-" + secrets.token_hex(12)
TOKEN = "ckpt-token-" + secrets.token_hex(12)
EXIT_STORE = 3

work = None
s3rver_dir = None
strict_ep = None
fakes = {}  # name -> (Popen, endpoint, log path)


def start_fake(name, code, status, tls=False):
    log = os.path.join(work, name + ".log")
    argv = [sys.executable, FAKE, "--code", code, "--status", str(status), "--log", log]
    if tls:
        argv += ["--cert", os.path.join(work, "cert.pem"), "--key", os.path.join(work, "key.pem")]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    port = int(p.stdout.readline())
    fakes[name] = (p, "%s://127.0.0.1:%d" % ("https" if tls else "http", port), log)


def setUpModule():
    global work, s3rver_dir, strict_ep
    work = tempdir("ckpt-s3err-")
    s3rver_dir = os.path.join(work, "s3rver")
    port = subprocess.run(["bash", S3RVER_SH, "start", s3rver_dir, "--strict", "--owner",
                           str(os.getpid()), "--bucket", "ckpt-test"], check=True,
                          capture_output=True, text=True, timeout=400).stdout.strip()
    strict_ep = "http://127.0.0.1:%s" % port
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", os.path.join(work, "key.pem"),
                    "-out", os.path.join(work, "cert.pem")],
                   check=True, capture_output=True, timeout=60)
    start_fake("region", "AuthorizationHeaderMalformed", 400)
    start_fake("token", "ExpiredToken", 400)
    start_fake("tls", "AccessDenied", 403, tls=True)


def tearDownModule():
    for p, _, _ in fakes.values():
        p.terminate()
        p.wait(timeout=10)
    if s3rver_dir:
        subprocess.run(["bash", S3RVER_SH, "stop", s3rver_dir], timeout=30)
    if work:
        shutil.rmtree(work, ignore_errors=True)


def env(secret=SECRET, token=None):
    e = dict(os.environ, AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY=secret,
             XDG_CACHE_HOME=os.path.join(work, "cache"))
    for k in ("AWS_SESSION_TOKEN", "CKPT_S3_ENDPOINT", "AWS_PROFILE", "AWS_REGION",
              "CKPT_S3_SIGNATURE", "CKPT_S3_CA_FILE"):
        e.pop(k, None)
    if token:
        e["AWS_SESSION_TOKEN"] = token
    return e


class Errors(unittest.TestCase):
    def ctl(self, endpoint, *args, secret=SECRET, token=None, json_out=False):
        argv = [CKPTCTL, "--store", "s3://ckpt-test/errs", "--s3-endpoint", endpoint,
                "--job", "j", *args, "ls"] + (["--json"] if json_out else [])
        r = subprocess.run(argv, env=env(secret, token), capture_output=True, text=True,
                           timeout=120)
        for text in (r.stdout, r.stderr):
            self.assertNotIn(SECRET, text)
            self.assertNotIn(TOKEN, text)
        return r

    def assertRefused(self, r, *words):
        self.assertEqual(r.returncode, EXIT_STORE, r.stderr)
        for w in words:
            self.assertIn(w, r.stderr)
        print("  ", r.stderr.strip())

    def test_good_secret_works(self):
        r = self.ctl(strict_ep, secret="S3RVER")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_wrong_secret(self):
        r = self.ctl(strict_ep)
        self.assertRefused(r, "SignatureDoesNotMatch", "AWS_SECRET_ACCESS_KEY")
        r = self.ctl(strict_ep, json_out=True)
        self.assertRefused(r, "SignatureDoesNotMatch")
        self.assertEqual(r.stdout, "")

    def test_wrong_region(self):
        r = self.ctl(fakes["region"][1], "--s3-region", "us-east-1")
        self.assertRefused(r, "AuthorizationHeaderMalformed", "--s3-region")

    def test_expired_token(self):
        r = self.ctl(fakes["token"][1], token=TOKEN)
        self.assertRefused(r, "ExpiredToken", "AWS_SESSION_TOKEN")
        # The token went out, signed (the log has header names only).
        with open(fakes["token"][2]) as f:
            log = f.read()
        self.assertIn("x-amz-security-token", log)
        self.assertNotIn(TOKEN, log)
        # V2 (libs3) cannot send a token: refused up front, by name.
        r = self.ctl(fakes["token"][1], "--s3-signature", "v2", token=TOKEN)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("AWS_SESSION_TOKEN", r.stderr)

    def test_untrusted_certificate(self):
        r = self.ctl(fakes["tls"][1])
        self.assertRefused(r, "not trusted", "--s3-ca-file")
        # Trusting the self-signed certificate gets through TLS to the
        # server's own answer.
        r = self.ctl(fakes["tls"][1], "--s3-ca-file", os.path.join(work, "cert.pem"))
        self.assertRefused(r, "AccessDenied")
        self.assertNotIn("not trusted", r.stderr)
        r = self.ctl(fakes["tls"][1], "--s3-ca-file", os.path.join(work, "nope.pem"))
        self.assertEqual(r.returncode, 2, r.stderr)  # a usage error: the file is missing
        self.assertIn("nope.pem", r.stderr)

    def mount_last_error(self, name, endpoint, *extra, token=None):
        m = Mount(os.path.join(work, name, "mnt"), store="s3://ckpt-test/" + name,
                  staging=os.path.join(work, name, "staging"), binary=CKPTFS,
                  extra_args=["--s3-endpoint", endpoint, "--refresh", "0.5", *extra],
                  env=env(token=token))
        with m:
            deadline = time.monotonic() + 30
            while True:
                with open(os.path.join(m.path, ".ckptfs", "status")) as f:
                    text = f.read()
                st = json.loads(text)
                if st.get("last_error") or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            with open("/proc/%d/cmdline" % m.pid, "rb") as f:
                cmdline = f.read().decode(errors="replace")
        for secret in (SECRET, TOKEN):
            self.assertNotIn(secret, text)
            self.assertNotIn(secret, cmdline)
            with open(m.log_path, errors="replace") as f:
                self.assertNotIn(secret, f.read())
            for dirpath, _, files in os.walk(os.path.join(work, name)):
                for fn in files:
                    with open(os.path.join(dirpath, fn), "rb") as f:
                        self.assertNotIn(secret.encode(), f.read(), os.path.join(dirpath, fn))
        print("   last_error:", st.get("last_error"))
        return st.get("last_error") or ""

    def test_mount_wrong_secret(self):
        err = self.mount_last_error("mnt-secret", strict_ep)
        self.assertIn("SignatureDoesNotMatch", err)
        self.assertIn("AWS_SECRET_ACCESS_KEY", err)

    def test_mount_wrong_region(self):
        err = self.mount_last_error("mnt-region", fakes["region"][1], "--s3-region", "us-east-1")
        self.assertIn("AuthorizationHeaderMalformed", err)
        self.assertIn("--s3-region", err)

    def test_mount_expired_token(self):
        err = self.mount_last_error("mnt-token", fakes["token"][1], token=TOKEN)
        self.assertIn("ExpiredToken", err)
        self.assertIn("AWS_SESSION_TOKEN", err)

    def test_mount_untrusted_certificate(self):
        err = self.mount_last_error("mnt-tls", fakes["tls"][1])
        self.assertIn("not trusted", err)


if __name__ == "__main__":
    if not CKPTFS or not CKPTCTL:
        sys.exit("CKPTFS and CKPTCTL must name the binaries")
    unittest.main(verbosity=2)
