#!/usr/bin/env python3
"""Hostile clients against a running `nodegate agent`: oversize requests, too many headers,
garbage bytes, slow clients, a slowloris attack and many connections, DNS rebinding on the debug
port. After each, the agent must still be alive and answer; slow clients must be cut off by the
request timeout, and /healthz must be answered within the kubelet's probe timeout throughout on
the health listener, which the chart's probes use (127.0.0.1, --health-listen): the attackers
are on the network and reach the metrics listener only."""
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from slowloris import Slowloris, kubelet_probes

PORT, DEBUG_PORT, HEALTH_PORT = 19240, 19241, 19242
BIN = os.environ["NODEGATE"]


def fail(msg):
    print("FAIL:", msg, file=sys.stderr)
    sys.exit(1)


def exchange(data, port=PORT, timeout=10.0):
    """Sends raw bytes, returns what came back (b'' when the server just closed)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may hang up before reading everything: that is a fine answer
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
            # Stop at a complete response, as a real client does with Content-Length.
            head, sep, body = out.partition(b"\r\n\r\n")
            if sep:
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:") and len(body) >= int(line.split(b":")[1]):
                        return out
        return out
    finally:
        s.close()


def status_of(reply):
    if not reply.startswith(b"HTTP/1."):
        return None
    return int(reply.split(b" ", 2)[1])


def get(path, port=PORT, timeout=5.0):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return r.status, r.read()


def alive(agent, what):
    if agent.poll() is not None:
        fail(f"agent exited ({agent.returncode}) after {what}")
    t0 = time.monotonic()
    code, _ = get("/healthz")
    if code != 200:
        fail(f"/healthz {code} after {what}")
    code, body = get("/metrics")
    if code != 200 or b"nodegate_check_success" not in body:
        fail(f"/metrics broken after {what}")
    print(f"ok: {what} (agent answered in {1000 * (time.monotonic() - t0):.1f} ms)")


def main():
    log = tempfile.NamedTemporaryFile(prefix="nodegate-agent-http.", suffix=".log", delete=False)
    agent = subprocess.Popen([BIN, "agent", "--kube", "none", "--listen", f"127.0.0.1:{PORT}",
                              "--debug-listen", f"127.0.0.1:{DEBUG_PORT}",
                              "--health-listen", f"127.0.0.1:{HEALTH_PORT}", "--resync", "3600",
                              "--dns-trace", "off"],
                             stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if get("/readyz")[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or agent.poll() is not None:
                fail("agent did not become ready: " + open(log.name).read())
            time.sleep(0.05)

        # Plain contract: unknown path 404, wrong method 405, traversal is just a path.
        for req, want in [(b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", 404),
                          (b"DELETE /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 405),
                          (b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", 405),
                          (b"GET /api/v1/checks HTTP/1.1\r\nHost: x\r\n\r\n", 404)]:
            got = status_of(exchange(req))
            if got != want:
                fail(f"{req[:40]!r}: status {got}, want {want}")
        if status_of(exchange(b"GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n")) not in (400, 404):
            fail("path traversal was not refused")
        if status_of(exchange(b"GET /api/v1/checks/%00%ff HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", DEBUG_PORT)) != 404:
            fail("odd check name not a 404")
        # A NUL must not cut the name short (the check exists: cpu-virt runs everywhere).
        if status_of(exchange(b"GET /api/v1/checks/cpu-virt HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", DEBUG_PORT)) != 200:
            fail("/api/v1/checks/cpu-virt is not 200")
        for odd in [b"cpu-virt%00", b"cpu-virt%00.json", b"cpu-virt%2f", b"cpu-virt/"]:
            got = status_of(exchange(b"GET /api/v1/checks/" + odd + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", DEBUG_PORT))
            if got != 404:
                fail(f"/api/v1/checks/{odd.decode()} answered {got}, want 404")
        # DNS rebinding: a page of evil.example whose name now resolves to 127.0.0.1 sends its own
        # Host. The debug port answers only loopback names; the metrics port is for Prometheus.
        for host, want in [(b"evil.example:%d" % DEBUG_PORT, 421), (b"evil.example", 421), (b"10.1.2.3", 421),
                           (b"localhost:%d" % DEBUG_PORT, 200), (b"127.0.0.1:%d" % DEBUG_PORT, 200),
                           (b"[::1]:%d" % DEBUG_PORT, 200)]:
            reply = exchange(b"GET /api/v1/checks HTTP/1.1\r\nHost: " + host + b"\r\n\r\n", DEBUG_PORT)
            if status_of(reply) != want:
                fail(f"debug port with Host {host.decode()}: {status_of(reply)}, want {want}")
            if want == 421 and b"cpu-virt" in reply:
                fail("the debug port leaked the checks to a rebound host")
        if status_of(exchange(b"GET /healthz HTTP/1.1\r\nHost: evil.example\r\n\r\n")) != 200:
            fail("the metrics port refused a Host it must not care about")
        alive(agent, "404/405 contract, check names, Host header")

        # Oversize: a 10 MB body is refused from its Content-Length alone.
        reply = exchange(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 10485760\r\n\r\n" + b"x" * 65536)
        if status_of(reply) != 413:
            fail(f"10 MB body: got {reply[:60]!r}, want 413")
        # Oversize headers and too many headers: refused (4xx) or closed, never served.
        for name, req in [("64 KB header", b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 65536 + b"\r\n\r\n"),
                          ("3000 headers", b"GET /metrics HTTP/1.1\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(3000)) + b"\r\n"),
                          ("64 KB request line", b"GET /" + b"a" * 65536 + b" HTTP/1.1\r\n\r\n")]:
            code = status_of(exchange(req))
            if code is not None and not 400 <= code < 500:
                fail(f"{name}: status {code}, want 4xx or a closed connection")
            alive(agent, f"{name} (got {code or 'closed'})")

        # 200 small headers fit the 16 KB header budget but not the count (100): refused, or
        # served; the count is bounded either way.
        many = b"GET /healthz HTTP/1.1\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(200)) + b"\r\n"
        if status_of(exchange(many)) not in (200, 400, 431):
            fail("200 small headers: unexpected answer")

        # Garbage: random bytes, binary junk, a TLS ClientHello on the plain port.
        rnd = random.Random(1)
        for i in range(20):
            junk = bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 8192)))
            code = status_of(exchange(junk, timeout=10))
            if code is not None and not 400 <= code < 500:
                fail(f"garbage #{i}: status {code}")
        exchange(bytes.fromhex("16030100a5010000a10303") + os.urandom(160))
        alive(agent, "garbage bytes")

        # Slow clients: 24 connections dribbling a request never finish it; each must be cut off
        # by the request timeout, and the agent must keep answering meanwhile.
        cut_after = []

        def slow():
            s = socket.create_connection(("127.0.0.1", PORT), timeout=30)
            t0 = time.monotonic()
            try:
                s.sendall(b"GET /metrics HTTP/1.1\r\n")
                while time.monotonic() - t0 < 25:
                    s.sendall(b"X-Slow: 1\r\n")
                    time.sleep(0.5)
            except OSError:
                pass
            cut_after.append(time.monotonic() - t0)
            s.close()

        threads = [threading.Thread(target=slow) for _ in range(24)]
        for t in threads:
            t.start()
        time.sleep(1)
        t0 = time.monotonic()
        code, _ = get("/healthz", timeout=15)
        waited = time.monotonic() - t0
        for t in threads:
            t.join()
        if code != 200:
            fail("healthz failed under slow clients")
        worst = max(cut_after)
        print(f"slow clients: healthz answered after {waited:.2f} s; slowest client cut after {worst:.1f} s")
        if worst > 20:
            fail(f"slow clients were not cut off (held {worst:.1f} s)")
        alive(agent, "24 slow clients")

        # Slowloris, the load of issue #22: 100 connections held open, each sending one more
        # header line every second and reconnecting whenever it is cut off. Meanwhile the
        # kubelet's liveness probe (3 s timeout, to the health listener as the chart has it)
        # asks /healthz twice a second for 12 s: every probe must pass, or the kubelet would
        # restart the agent for anyone on the network. The metrics listener's workers are all
        # held meanwhile (civetweb: a worker per connection): scrapes wait, and are counted.
        with Slowloris(PORT, 100) as attack:
            probes = kubelet_probes(HEALTH_PORT, 12)
        failed = [err or f"status {status}" for _, status, err in probes if status != 200]
        slowest = max(t for t, _, _ in probes)
        print(f"slowloris: {attack.opened} connections opened by 100 attackers; {len(probes)} probes, "
              f"{len(failed)} failed, slowest {1000 * slowest:.0f} ms; /metrics on the attacked "
              f"listener: {attack.scrape_summary()}")
        if failed:
            fail(f"/healthz failed under slowloris: {failed[:3]}")
        if slowest > 1.0:
            fail(f"/healthz took {slowest:.2f} s under slowloris")
        alive(agent, "slowloris")

        # Many connections at once: most are served, none crashes the agent.
        ok = []

        def burst():
            try:
                if status_of(exchange(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", timeout=20)) == 200:
                    ok.append(1)
            except OSError:
                pass

        threads = [threading.Thread(target=burst) for _ in range(300)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(f"300 concurrent connections: {len(ok)} served")
        if len(ok) < 150:
            fail(f"only {len(ok)} of 300 concurrent requests were served")
        # Connections opened and dropped without a byte.
        for _ in range(200):
            socket.create_connection(("127.0.0.1", PORT)).close()
        alive(agent, "connection storms")

        rss = 0
        for line in open(f"/proc/{agent.pid}/status"):
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
        print(f"agent RSS after the abuse: {rss} kB")
        if rss > 100 * 1024:
            fail(f"RSS grew to {rss} kB")
    finally:
        agent.terminate()
        try:
            agent.wait(5)
        except subprocess.TimeoutExpired:
            agent.kill()
        os.unlink(log.name)


if __name__ == "__main__":
    main()
