import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class FakeEnv:
    """What the config generators and the runner read from servers.Env, with nothing on disk."""

    run_dir = "/tmp/x"
    docroot = "/run/htdocs"
    cert = "/run/cert.pem"
    key = "/run/key.pem"
    is_root = False
    h3_client = None
    h2o_quic = None
    spate = "/nonexistent/spate"
    floor = "/nonexistent/floor"
    h2floor = "/nonexistent/h2floor"


@pytest.fixture
def env():
    return FakeEnv()
