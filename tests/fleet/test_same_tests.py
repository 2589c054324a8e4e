"""The hub, stock-client, `kernels` and publisher tests, unchanged, through nginx in front of 3 replicas.

Importing a test module's tests (and its module fixtures) here collects them again with this folder's `hub`
fixture: the fleet. CI runs every stock-client test and the core `kernels` and publisher ones (its time
budget); `KERNEL_HUB_FLEET_FULL=1` runs those two modules whole. Tests that read a hub's local data folder stay out
(a fleet has none).
"""

import os

from tests.hub.test_kernels_client import *
from tests.hub.test_stock_client import *
from tests.publish.test_publish import (  # noqa: F401
    ctx,
    dists,
    test_cli_publish_then_stock_kernels_get_kernel,
    test_concurrent_publishes_onto_existing_version_one_wins,
    test_publish_creates_signed_complete_version,
)

if os.environ.get("KERNEL_HUB_FLEET_FULL") == "1":
    from tests.publish.test_publish import *
