"""Running on several devices: data parallelism over a mesh of devices
(``data_parallel``) and MXNet's KVStore API (``kvstore``, also ``sg.kv``);
across processes, ``distributed`` (joining them through jax.distributed)
and ``launch`` (``symgraph launch``)."""
from .data_parallel import BATCH_AXIS, DeviceSet  # noqa: F401
