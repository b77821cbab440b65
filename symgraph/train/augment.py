"""Whole-batch augmentation on the device: the DAWNBench CIFAR-10 recipe's
random crop of a padded image, horizontal flip and cutout, in one jitted
program per batch shape.

    from symgraph.train import augment as A
    key = jax.random.key(0)
    x = A.augment(jax.random.fold_in(key, step), uint8_batch)  # float32 [N, 3, 32, 32]
    x = A.normalize(uint8_batch)                               # evaluation: no augmentation
    train = A.DeviceAugmentIter(sg.io.NDArrayIter(x_u8, y, 512, shuffle=True,
                                                  dtype=None), seed=0)

The host moves only the uint8 batch (a quarter of float32's bytes); the
float images exist only on the device. For every image, independently:

1. normalisation: ``(pixel - mean) / std`` per channel, CIFAR-10's
   training-set mean and standard deviation (``CIFAR_MEAN``/``CIFAR_STD``,
   in pixel units) unless given;
2. padding by ``pad`` pixels on each side, ``'reflect'`` (mirror without
   repeating the edge, NumPy's and PyTorch's ReflectionPad2d) or
   ``'zeros'`` (zero after normalisation: the mean colour);
3. a random ``crop`` x ``crop`` window of the padded image, every offset
   in ``[0, H + 2*pad - crop]`` equally likely on each axis;
4. a horizontal flip with probability 0.5 (``flip``);
5. cutout (``cutout`` > 0): one ``cutout`` x ``cutout`` window set to
   zero in every channel, its position uniform over the windows that lie
   **fully inside** the crop (never clipped at the border), so exactly
   ``cutout**2`` pixels per channel are zeroed.

Every random draw comes from ``key``: the same key and batch give the same
output, and a training loop folds the step number into a base key
(``DeviceAugmentIter`` does) so each step draws afresh.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..ndarray import NDArray
from . import TrainError
from .io import DataBatch, DataDesc, DataIter

# CIFAR-10's training set, per channel (R, G, B), in pixel units 0..255
CIFAR_MEAN = (0.4914 * 255, 0.4822 * 255, 0.4465 * 255)
CIFAR_STD = (0.2471 * 255, 0.2435 * 255, 0.2616 * 255)
PADDINGS = ("reflect", "zeros")


def _check(images, pad, crop, cutout, padding, mean, std):
    shape = tuple(images.shape)
    if len(shape) != 4 or images.dtype != np.uint8:
        raise TrainError(f"augment: images must be a uint8 [N, C, H, W] batch, got "
                         f"{images.dtype} {shape}")
    n, c, h, w = shape
    if pad < 0 or cutout < 0:
        raise TrainError(f"augment: pad and cutout must not be negative, got {pad}, {cutout}")
    if padding not in PADDINGS:
        raise TrainError(f"augment: padding={padding!r}; use 'reflect' or 'zeros'")
    if padding == "reflect" and pad >= min(h, w):
        raise TrainError(f"augment: reflect padding of {pad} needs images larger than "
                         f"{pad}, got {h}x{w}")
    if not 0 < crop <= min(h, w) + 2 * pad:
        raise TrainError(f"augment: crop {crop} must be positive and fit the padded image "
                         f"({h + 2 * pad}x{w + 2 * pad})")
    if cutout > crop:
        raise TrainError(f"augment: a cutout of {cutout} does not fit inside a crop of {crop}")
    if len(mean) != c or len(std) != c or min(std) <= 0:
        raise TrainError(f"augment: mean and std need {c} values (std positive), got "
                         f"{len(mean)} and {len(std)}")


def _normalize(images, mean, std, dtype):
    c = images.shape[1]
    m = jnp.asarray(mean, jnp.float32).reshape(1, c, 1, 1)
    s = jnp.asarray(std, jnp.float32).reshape(1, c, 1, 1)
    return ((images.astype(jnp.float32) - m) / s).astype(dtype)


@functools.partial(jax.jit, static_argnames=("pad", "crop", "flip", "cutout", "padding",
                                             "mean", "std", "dtype"))
def _augment(key, images, pad, crop, flip, cutout, padding, mean, std, dtype):
    n, c, h, w = images.shape
    x = _normalize(images, mean, std, jnp.float32)
    if pad:
        mode = "reflect" if padding == "reflect" else "constant"
        x = jnp.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)), mode=mode)
    k_y, k_x, k_flip, k_cy, k_cx = jax.random.split(key, 5)
    hp, wp = h + 2 * pad, w + 2 * pad
    oy = jax.random.randint(k_y, (n,), 0, hp - crop + 1)
    ox = jax.random.randint(k_x, (n,), 0, wp - crop + 1)
    zero = jnp.zeros((), oy.dtype)
    x = jax.vmap(lambda img, y0, x0: jax.lax.dynamic_slice(img, (zero, y0, x0),
                                                           (c, crop, crop)))(x, oy, ox)
    if flip:
        mirror = jax.random.bernoulli(k_flip, 0.5, (n,))
        x = jnp.where(mirror[:, None, None, None], x[..., ::-1], x)
    if cutout:
        cy = jax.random.randint(k_cy, (n,), 0, crop - cutout + 1)
        cx = jax.random.randint(k_cx, (n,), 0, crop - cutout + 1)
        r = jnp.arange(crop)
        rows = (r[None, :] >= cy[:, None]) & (r[None, :] < cy[:, None] + cutout)
        cols = (r[None, :] >= cx[:, None]) & (r[None, :] < cx[:, None] + cutout)
        hole = rows[:, :, None] & cols[:, None, :]                        # [n, crop, crop]
        x = jnp.where(hole[:, None], jnp.zeros((), x.dtype), x)
    return x.astype(dtype)


def _array(images):
    if isinstance(images, NDArray):
        return images.data
    return images if isinstance(images, jax.Array) else np.asarray(images)


def augment(key, images_uint8_nchw, pad: int = 4, crop: int = 32, flip: bool = True,
            cutout: int = 8, padding: str = "reflect", mean=CIFAR_MEAN, std=CIFAR_STD,
            dtype="float32"):
    """The augmented, normalised batch (a ``jax.Array`` [N, C, crop, crop]
    of ``dtype``) of a uint8 NCHW batch (NumPy, NDArray or jax.Array: a
    host batch is copied to the default device as uint8). ``key``: a JAX
    key (``jax.random.key``) or an int seed. See the module docstring for
    the steps; ``pad=0, flip=False, cutout=0`` and ``crop`` = the image
    side leave normalisation only."""
    x = _array(images_uint8_nchw)
    pad, crop, cutout = int(pad), int(crop), int(cutout)
    mean, std = tuple(float(v) for v in mean), tuple(float(v) for v in std)
    _check(x, pad, crop, cutout, padding, mean, std)
    if isinstance(key, (int, np.integer)):
        key = jax.random.key(int(key))
    return _augment(key, jnp.asarray(x), pad=pad, crop=crop, flip=bool(flip), cutout=cutout,
                    padding=padding, mean=mean, std=std, dtype=jnp.dtype(dtype).name)


@functools.partial(jax.jit, static_argnames=("mean", "std", "dtype"))
def _normalize_jit(images, mean, std, dtype):
    return _normalize(images, mean, std, dtype)


def normalize(images_uint8_nchw, mean=CIFAR_MEAN, std=CIFAR_STD, dtype="float32"):
    """``(pixel - mean) / std`` per channel on the device, no augmentation
    (evaluation's half of ``augment``)."""
    x = _array(images_uint8_nchw)
    mean, std = tuple(float(v) for v in mean), tuple(float(v) for v in std)
    if x.ndim != 4 or x.dtype != np.uint8:
        raise TrainError(f"normalize: images must be a uint8 [N, C, H, W] batch, got "
                         f"{x.dtype} {tuple(x.shape)}")
    if len(mean) != x.shape[1] or len(std) != x.shape[1] or min(std) <= 0:
        raise TrainError(f"normalize: mean and std need {x.shape[1]} values (std positive)")
    return _normalize_jit(jnp.asarray(x), mean=mean, std=std, dtype=jnp.dtype(dtype).name)


class DeviceAugmentIter(DataIter):
    """Wraps an iterator of uint8 image batches (``NDArrayIter(...,
    dtype=None)`` over ``symgraph.train.cifar``'s arrays): each batch's
    images go to the device as uint8 and come back from ``augment`` (with
    ``train=True``) or ``normalize`` (``train=False``) as ``dtype``;
    labels are given as float32. The key of a batch is
    ``fold_in(fold_in(key(seed), epoch), batch number)``, so runs repeat
    and every step draws afresh; ``reset`` starts the next epoch
    (``set_epoch`` positions it). ``augment_args`` go to ``augment``
    (``pad``, ``crop``, ``flip``, ``cutout``, ``padding``, ``mean``,
    ``std``)."""

    def __init__(self, data_iter, seed: int = 0, train: bool = True, dtype="float32",
                 data_name: str | None = None, **augment_args):
        super().__init__(data_iter.batch_size)
        self.data_iter = data_iter
        self.seed, self.train, self.dtype = int(seed), bool(train), dtype
        self.augment_args = dict(augment_args)
        bad = set(self.augment_args) - {"pad", "crop", "flip", "cutout", "padding", "mean",
                                        "std"}
        if bad:
            raise TrainError(f"DeviceAugmentIter: unknown argument(s) {', '.join(sorted(bad))}")
        desc = data_iter.provide_data[0]
        self.data_name = data_name or desc.name
        self._in_shape = tuple(desc.shape)
        crop = int(self.augment_args.get("crop", 32)) if train else self._in_shape[-1]
        self.augment_args.setdefault("crop", crop)
        self._out_shape = self._in_shape[:2] + ((crop, crop) if train else self._in_shape[2:])
        self.epoch = 0
        self._nbatch = 0
        self._base = jax.random.key(self.seed)

    @property
    def num_batches(self):
        return getattr(self.data_iter, "num_batches", None)

    def reset(self) -> None:
        self.data_iter.reset()
        self.epoch += 1
        self._nbatch = 0

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.data_iter, "set_epoch"):
            self.data_iter.set_epoch(epoch)
        self.epoch, self._nbatch = int(epoch), 0

    def next(self) -> DataBatch:
        batch = self.data_iter.next()
        images = batch.data[0]
        if self.train:
            key = jax.random.fold_in(jax.random.fold_in(self._base, self.epoch), self._nbatch)
            x = augment(key, images, dtype=self.dtype, **self.augment_args)
        else:
            kw = {k: v for k, v in self.augment_args.items() if k in ("mean", "std")}
            x = normalize(images, dtype=self.dtype, **kw)
        self._nbatch += 1
        labels = [np.asarray(lab.asnumpy() if isinstance(lab, NDArray) else lab, np.float32)
                  for lab in (batch.label or [])]
        return DataBatch([NDArray(x)], labels, batch.pad, batch.index, batch.bucket_key,
                         provide_data=self.provide_data, provide_label=self.provide_label)

    @property
    def provide_data(self):
        return [DataDesc(self.data_name, self._out_shape, jnp.dtype(self.dtype).name)]

    @property
    def provide_label(self):
        return [DataDesc(d.name, tuple(d.shape), "float32") for d in self.data_iter.provide_label]


__all__ = ["augment", "normalize", "DeviceAugmentIter", "CIFAR_MEAN", "CIFAR_STD"]
