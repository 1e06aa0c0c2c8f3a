#!/usr/bin/env python3
"""A DNS server that answers every query with SERVFAIL (a broken CoreDNS upstream, for the e2e
test). Usage: servfail_server.py ADDR PORT"""
import socket
import sys

sock = socket.socket(socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET, socket.SOCK_DGRAM)
sock.bind((sys.argv[1], int(sys.argv[2])))
while True:
    data, peer = sock.recvfrom(4096)
    if len(data) < 12:
        continue
    # Same id and question; QR=1, opcode and RD copied, RA=1, RCODE=2; no answer records.
    flags = 0x8000 | (data[2] & 0x79) << 8 | 0x80 | 2
    reply = data[:2] + flags.to_bytes(2, "big") + data[4:6] + b"\0\0\0\0\0\0"
    # Question section only: skip the name, then qtype and qclass.
    i = 12
    while i < len(data) and data[i] != 0:
        i += data[i] + 1
    sock.sendto(reply + data[12:i + 5], peer)
