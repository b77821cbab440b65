import os

# 8 simulated CPU devices for the data-parallel tests; set before JAX starts.
# Appended to flags already in XLA_FLAGS (setdefault would drop the count
# whenever XLA_FLAGS holds anything else); a count given there is kept.
_flags = os.environ.get("XLA_FLAGS", "")
if "--xla_force_host_platform_device_count" not in _flags:
    os.environ["XLA_FLAGS"] = f"{_flags} --xla_force_host_platform_device_count=8".strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

# Gradient checks run in float64 where the ops allow it.
jax.config.update("jax_enable_x64", True)
