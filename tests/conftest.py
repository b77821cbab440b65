import os

# 8 simulated CPU devices for the data-parallel tests; set before JAX starts.
# Appended to flags already in XLA_FLAGS (setdefault would drop the count
# whenever XLA_FLAGS holds anything else); a count given there is kept.
_flags = os.environ.get("XLA_FLAGS", "")
if "--xla_force_host_platform_device_count" not in _flags:
    os.environ["XLA_FLAGS"] = f"{_flags} --xla_force_host_platform_device_count=8".strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import pytest  # noqa: E402

# Gradient checks run in float64 where the ops allow it.
jax.config.update("jax_enable_x64", True)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "x64_off: runs with jax_enable_x64 off, as users run (float32 by default); "
        "a module opts in whole with pytestmark = pytest.mark.x64_off")


@pytest.fixture(autouse=True)
def _x64_mode(request):
    """x64_off tests run with jax_enable_x64 switched off process-wide and
    switched back after the test, pass or fail. Process-wide, not the
    thread-local ``jax.enable_x64(False)`` context: Module.fit prefetches
    batches on a background thread, which would still see x64 on. Safe
    under pytest-xdist: each worker is a process running one test at a
    time. Every jit traced meanwhile traces apart (the flag is part of
    JAX's trace context), so nothing compiled with x64 on is reused."""
    if request.node.get_closest_marker("x64_off") is None:
        yield
        return
    before = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", False)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", before)
