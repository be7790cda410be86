"""`ray ...` with a loopback address kept as given (python raynode.py start ...).

Ray rewrites 127.0.0.1 given as `--node-ip-address` or `--address` to the machine's outward
address (ray._private.services.resolve_ip_for_localhost); the test cluster must listen and
connect on 127.0.0.1 only, so its nodes are started through Ray's own CLI entry point with
that rewriting turned off."""

import sys

import ray._private.services as services

services.resolve_ip_for_localhost = lambda host: host  # type: ignore[attr-defined]

from ray.scripts.scripts import main  # noqa: E402

sys.argv[0] = "ray"
sys.exit(main())
