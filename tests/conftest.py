import os

# 8 simulated CPU devices for the data-parallel tests; set before JAX starts.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

# Gradient checks run in float64 where the ops allow it.
jax.config.update("jax_enable_x64", True)
