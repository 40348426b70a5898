#!/usr/bin/python3
"""test/fake_model.py, unchanged, with TCP_NODELAY on its connections.

The scripted model writes an answer's headers and its body in two writes; with
Nagle's algorithm on, the body waits for the peer's delayed ACK, about 40 ms
per answer on loopback. That stall is the test server's, not the module's or
mod_proxy's, and it would swamp every figure the benchmark takes, so the
benchmark turns Nagle off for it. Same arguments and READY line as
fake_model.py.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "test"))
import fake_model  # noqa: E402

fake_model.Handler.disable_nagle_algorithm = True

if __name__ == "__main__":
    fake_model.main()
