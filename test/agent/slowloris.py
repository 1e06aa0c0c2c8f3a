"""The slowloris load of issue #22 and the kubelet's probe, shared by http_robustness_test.py
(which asserts on them) and tools/bench/http_server_cost.py (which measures under them)."""
import socket
import threading
import time
import urllib.request


def timed_get(port, path, timeout):
    """GET on a new connection: (seconds, HTTP status or None, error text or "")."""
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            r.read()
            return time.monotonic() - t0, r.status, ""
    except OSError as e:
        return time.monotonic() - t0, None, str(e)


class Slowloris:
    """`attackers` connections to `port`, each sending one more header line a second and
    reconnecting whenever it is cut off; meanwhile one scrape of /metrics a second on the same
    port is recorded in .scrapes as (seconds, answered 200). A context manager: stops on exit."""

    def __init__(self, port, attackers=100):
        self.port, self.opened, self.scrapes = port, 0, []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._attack, daemon=True) for _ in range(attackers)]
        self._scraper = threading.Thread(target=self._scrape, daemon=True)

    def _attack(self):
        while not self._stop.is_set():
            s = None
            try:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
                self.opened += 1
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                while not self._stop.is_set():
                    time.sleep(1)
                    s.sendall(b"X-a: b\r\n")
            except OSError:
                pass
            finally:
                if s:
                    s.close()

    def _scrape(self):
        while not self._stop.is_set():
            seconds, status, _ = timed_get(self.port, "/metrics", 10)
            self.scrapes.append((seconds, status == 200))
            time.sleep(1)

    def __enter__(self):
        for t in self._threads:
            t.start()
        time.sleep(1.5)  # every attacker connected before anything is measured
        self._scraper.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for t in self._threads:
            t.join(10)
        self._scraper.join(15)

    def scrape_summary(self):
        answered = sum(ok for _, ok in self.scrapes)
        slowest = max((t for t, _ in self.scrapes), default=0)
        return f"{answered} of {len(self.scrapes)} scrapes answered, slowest {slowest:.1f} s"


def kubelet_probes(port, seconds):
    """/healthz twice a second for `seconds`, 3 s timeout (the chart's liveness probe):
    [(seconds, status or None, error)]."""
    probes = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        probes.append(timed_get(port, "/healthz", 3))
        time.sleep(0.5)
    return probes
