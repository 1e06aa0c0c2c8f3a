#!/usr/bin/env python3
"""The real `nodegate device-probe` helper against raw socket clients (issue 17 item 6).

Every malformed, oversized, unknown or unsupported request gets an error reply and the helper
keeps serving (a good request right after each proves it); a client that sends nothing is cut
off at the request deadline; a burst of idle connections gets "busy" beyond the limit without
stopping the service; a non-root peer is refused; the helper lives in a network namespace of
its own (no network listener can exist); a second helper on a live socket fails, a stale socket
of a killed one is replaced; SIGTERM removes the socket.
"""
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

NODEGATE = os.environ["NODEGATE"]
failures = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond:
        failures.append(what)


def frame(body):
    return struct.pack(">I", len(body)) + body


def read_frame(s, timeout=10):
    s.settimeout(timeout)
    header = b""
    while len(header) < 4:
        chunk = s.recv(4 - len(header))
        if not chunk:
            return None
        header += chunk
    (n,) = struct.unpack(">I", header)
    body = b""
    while len(body) < n:
        chunk = s.recv(n - len(body))
        if not chunk:
            return None
        body += chunk
    return json.loads(body)


def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s


def ask_raw(path, raw, timeout=10):
    """Sends raw bytes, returns the reply (None if the connection closed without one)."""
    s = connect(path)
    try:
        try:
            s.sendall(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused at once (busy, not allowed): the reason is still there to read
        return read_frame(s, timeout)
    finally:
        s.close()


def ask(path, req):
    return ask_raw(path, frame(json.dumps(req).encode()))


def still_serving(path, after):
    r = ask(path, {"v": 1, "op": "hello"})
    check(r is not None and r.get("ok") is True and "tun" in r["result"]["ops"],
          "still serving after " + after)


def start_helper(sock, log):
    p = subprocess.Popen([NODEGATE, "device-probe", "--socket", sock, "--log-level", "debug"],
                         stdout=log, stderr=subprocess.STDOUT)
    for _ in range(200):
        if os.path.exists(sock):
            return p
        time.sleep(0.05)
    raise SystemExit("the helper did not create " + sock)


def main():
    tmp = tempfile.mkdtemp(prefix="nodegate-devprobe-proto-")
    os.chmod(tmp, 0o755)
    sock = os.path.join(tmp, "dp.sock")
    log = open(os.path.join(tmp, "helper.log"), "w+")
    helper = start_helper(sock, log)
    try:
        run(sock, helper, log, tmp)
    finally:
        for p in [helper]:
            if p.poll() is None:
                p.kill()
                p.wait()
        log.seek(0)
        if failures:
            print("--- helper log\n" + log.read()[-4000:])
        subprocess.run(["rm", "-rf", tmp])
    if failures:
        print("%d failures" % len(failures))
        sys.exit(1)
    print("PASS")


def run(sock, helper, log, tmp):
    mode = os.stat(sock).st_mode & 0o777
    check(mode == 0o600, "socket mode 0600 (got %o)" % mode)
    hello = ask(sock, {"v": 1, "op": "hello"})
    check(hello["ok"] and hello["result"]["protocol"] == 1, "hello: %s" % hello["result"])
    kvm = ask(sock, {"v": 1, "op": "kvm-device"})
    check(kvm["ok"] and kvm["result"]["check"] == "kvm-device",
          "kvm-device: %s %s" % (kvm["result"]["status"], kvm["result"]["reason"]))

    bad = [
        ("not JSON", frame(b"{nope"), "not JSON"),
        ("a JSON array", frame(b"[1,2]"), "not a JSON object"),
        ("empty frame", frame(b""), "empty"),
        ("unknown op", frame(b'{"v":1,"op":"mkfs"}'), 'unknown op "mkfs"'),
        ("protocol version 2", frame(b'{"v":2,"op":"hello"}'), "unsupported protocol version 2"),
        ("a path in the request", frame(b'{"v":1,"op":"kvm-device","path":"/dev/sda"}'),
         'unknown field "path"'),
        ("arguments for lvm", frame(b'{"v":1,"op":"lvm-fullreport","args":["--config"]}'),
         'unknown field "args"'),
        ("deadline out of range", frame(b'{"v":1,"op":"hello","deadline_ms":0}'), "out of range"),
        ("oversized length", struct.pack(">I", 1 << 20) + b"x" * 64, "over the limit of 1024"),
        ("an HTTP request", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "over the limit"),
        ("invalid UTF-8", frame(b'{"v":1,"op":"hel\xff"}'), "not JSON"),
    ]
    for what, raw, want in bad:
        r = ask_raw(sock, raw)
        check(r is not None and r["ok"] is False and want in r["error"],
              "%s refused: %s" % (what, r and r.get("error")))
        still_serving(sock, what)

    # A body shorter than its header says, then silence: cut off at the request deadline.
    t0 = time.monotonic()
    r = ask_raw(sock, struct.pack(">I", 100) + b'{"v":1', timeout=10)
    took = time.monotonic() - t0
    check(r is not None and "before the deadline" in r["error"] and 1.5 < took < 4,
          "silent client cut off after %.1f s: %s" % (took, r and r["error"]))
    # A client that connects and leaves.
    connect(sock).close()
    still_serving(sock, "a client that left")

    # Idle connections beyond the limit: "busy" at once for the extra ones, service afterwards.
    idle = [connect(sock) for _ in range(4)]
    time.sleep(0.2)
    t0 = time.monotonic()
    r = ask(sock, {"v": 1, "op": "hello"})
    check(r is not None and r["ok"] is False and r["error"].startswith("busy"),
          "a fifth connection is told busy in %.2f s: %s" % (time.monotonic() - t0, r))
    for c in idle:
        c.close()
    time.sleep(0.3)
    still_serving(sock, "idle connections")

    # A non-root peer: the socket file refuses it; made connectable, the peer check does.
    def as_nobody(fn):
        pid = os.fork()
        if pid == 0:
            try:
                os.setgid(65534)
                os.setuid(65534)
                os._exit(fn())
            except BaseException:
                os._exit(99)
        return os.waitpid(pid, 0)[1] >> 8

    def nobody_connect():
        try:
            connect(sock).close()
            return 1
        except PermissionError:
            return 0

    check(as_nobody(nobody_connect) == 0, "uid 65534 cannot connect to the 0600 socket")
    os.chmod(sock, 0o666)

    def nobody_ask():
        r = ask(sock, {"v": 1, "op": "kvm-device"})
        return 0 if r is not None and r["ok"] is False and "not allowed" in r["error"] else 1

    check(as_nobody(nobody_ask) == 0, "uid 65534 is refused by the peer check")
    os.chmod(sock, 0o600)
    still_serving(sock, "a refused peer")

    # No network: the helper's network namespace is not ours.
    mine = os.readlink("/proc/self/ns/net")
    theirs = os.readlink("/proc/%d/ns/net" % helper.pid)
    check(mine != theirs, "the helper left the network namespace (%s vs %s)" % (theirs, mine))

    # A second helper on a live socket fails; after a kill -9, a new one replaces the stale file.
    second = subprocess.run([NODEGATE, "device-probe", "--socket", sock],
                            capture_output=True, text=True, timeout=10)
    check(second.returncode == 1 and "another helper serves it" in second.stderr,
          "second helper on a live socket: exit %d" % second.returncode)
    helper.kill()
    helper.wait()
    check(os.path.exists(sock), "a killed helper leaves its socket behind")
    helper2 = start_helper(sock, log)
    time.sleep(0.2)
    still_serving(sock, "a restart over a stale socket")
    helper2.send_signal(signal.SIGTERM)
    rc = helper2.wait(timeout=5)
    check(rc == 0 and not os.path.exists(sock), "SIGTERM: exit %d, socket removed" % rc)


if __name__ == "__main__":
    main()
