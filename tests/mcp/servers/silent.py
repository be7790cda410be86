"""A server that starts and never answers the handshake (see README.md)."""

import sys
import time

print("silent: up, and saying nothing", file=sys.stderr, flush=True)
while True:
    time.sleep(3600)
