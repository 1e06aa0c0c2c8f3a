#!/usr/bin/env python3
"""Runs one command in a test guest over its control serial port (test/guest/init's loop).

usage: guest_ctl.py SOCKET TIMEOUT_SECONDS COMMAND

SOCKET is QEMU's chardev socket for the guest's ttyS1. Prints the command's output and exits
with its exit code; 124 if no "ng-done" line came within the timeout, 125 if the socket could not
be reached.
"""
import re
import secrets
import socket
import sys
import time


STALE = re.compile(rb"^ng-done [0-9a-f]{12} [0-9]+\n", re.M)


def main():
    if len(sys.argv) != 4:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    path, timeout, command = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    if "\n" in command:
        print("guest_ctl: a command is one line", file=sys.stderr)
        return 2
    deadline = time.monotonic() + timeout
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.settimeout(max(0.1, deadline - time.monotonic()))
        s.connect(path)
    except OSError as e:
        print(f"guest_ctl: failed to connect to {path}: {e}", file=sys.stderr)
        return 125
    tag = secrets.token_hex(6)
    s.sendall(f"{tag} {command}\n".encode())
    marker = f"ng-done {tag} ".encode()
    buf = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            sys.stdout.buffer.write(buf)
            print(f"guest_ctl: no answer within {timeout:g} s: {command}", file=sys.stderr)
            return 124
        s.settimeout(left)
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            continue
        if not chunk:
            sys.stdout.buffer.write(buf)
            print("guest_ctl: the guest's control port closed", file=sys.stderr)
            return 125
        buf += chunk
        at = buf.find(marker)
        if at >= 0:
            end = buf.find(b"\n", at)
            if end < 0:
                continue
            # A command that timed out earlier may finish now: its marker is not output.
            sys.stdout.buffer.write(STALE.sub(b"", buf[:at]))
            sys.stdout.flush()
            return int(buf[at + len(marker):end].strip() or b"1")


if __name__ == "__main__":
    sys.exit(main())
