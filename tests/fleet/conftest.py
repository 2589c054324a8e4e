"""Fleet fixtures: one fleet (PostgreSQL + SeaweedFS + 3 replicas + nginx) for the whole session.

Inside tests/fleet the `hub` fixture *is* the fleet's load balancer, so hub, client and publisher tests imported
here run unchanged against 3 stateless replicas. A server that cannot start skips these tests with its reason.
"""

from __future__ import annotations

import pytest
from fleet_hub import Fleet
from servers import ServerUnavailable


@pytest.fixture(scope="session")
def fleet():
    f = Fleet(3)
    try:
        f.start()
    except ServerUnavailable as e:
        f.stop()
        pytest.skip(f"the fleet cannot start here: {e}")
    yield f
    f.stop()


@pytest.fixture(scope="session")
def hub(fleet):
    return fleet
