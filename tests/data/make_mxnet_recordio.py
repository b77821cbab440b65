"""Regenerates the MXNet-written record files in tests/data/recordio/ (not
run by the tests; tests/test_recordio.py imports its payload recipes).

Needs MXNet 1.9.1 in its own environment (never a symgraph dependency):
    python -m venv mxvenv
    mxvenv/bin/pip install mxnet==1.9.1 numpy==1.23.5 opencv-python-headless
    mxvenv/bin/python tests/data/make_mxnet_recordio.py

It writes, under tests/data/recordio/:
  plain.rec              PAYLOADS through mx.recordio.MXRecordIO (empty
                         records, the magic word at aligned and unaligned
                         offsets, several magic words in a row)
  indexed.rec/.idx       HEADERS packed with mx.recordio.pack through
                         MXIndexedRecordIO (scalar and multi-label headers)
  images/                six small images in two class folders (the
                         sources, committed so that pass-through packing
                         can be compared byte for byte)
  imgs.lst, imgs.rec/.idx
                         MXNet's tools/im2rec.py --list --recursive, then
                         its packing (OpenCV JPEG, quality 95)
  imgs_pass.rec/.idx     the same with --pass-through (the files' bytes)
  iter_expected.npz      MXNet's ImageRecordIter on imgs.rec, data_shape
                         (3, 24, 24), no augmentation: data (uint8) and labels
  iter_resize_expected.npz
                         the same with resize=20 (short side) and a centred
                         (3, 16, 16) crop: OpenCV's bilinear resize
"""
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "recordio")
MAGIC = b"\x0a\x23\xd7\xce"  # 0xced7230a, little-endian

# payloads of plain.rec, in order
PAYLOADS = [
    b"",
    b"a",
    b"abcd",
    b"hello world",
    MAGIC,                                   # the whole record is the magic word
    MAGIC + b"tail",                         # at offset 0
    b"head" + MAGIC + b"tail!",              # in the middle, unaligned end
    b"head" + MAGIC + MAGIC + b"x" + MAGIC,  # several, one at the very end
    b"ab" + MAGIC + b"cd",                   # unaligned: not split
    b"abcd" + MAGIC[:3],                     # part of the word at the end
    bytes(range(256)) * 3,
]

# (header, payload) of indexed.rec, keys 0.. in order
HEADERS = [
    ((0, 3.0, 0, 0), b"first"),
    ((0, -1.5, 7, 9), b""),
    ((0, [1.0, 2.5, 3.0], 2 ** 40, 5), b"multi" + MAGIC + b"label"),
    ((0, [4.0], 3, 0), b"one-label-array"),
]


def write_images(root):
    """Six small images (28 high, 30 wide) in two class folders."""
    import cv2
    rng = np.random.RandomState(0)
    yy, xx = np.mgrid[:28, :30]
    for c, cls in enumerate(["cat", "dog"]):
        os.makedirs(os.path.join(root, cls), exist_ok=True)
        for k in range(3):
            base = np.stack([xx * (3 + k) + 40 * c, yy * (5 - k) + 20, (xx + yy) * 2 + 60 * k],
                            axis=-1)
            img = np.clip(base + rng.randint(0, 20, base.shape), 0, 255).astype(np.uint8)
            ext = ".png" if k == 2 else ".jpg"
            cv2.imwrite(os.path.join(root, cls, f"{cls}{k}{ext}"), img,
                        [cv2.IMWRITE_JPEG_QUALITY, 90])


def main():
    import mxnet as mx
    os.makedirs(OUT, exist_ok=True)
    w = mx.recordio.MXRecordIO(os.path.join(OUT, "plain.rec"), "w")
    for p in PAYLOADS:
        w.write(p)
    w.close()

    w = mx.recordio.MXIndexedRecordIO(os.path.join(OUT, "indexed.idx"),
                                      os.path.join(OUT, "indexed.rec"), "w")
    for i, (h, p) in enumerate(HEADERS):
        w.write_idx(i, mx.recordio.pack(mx.recordio.IRHeader(*h), p))
    w.close()

    images = os.path.join(OUT, "images")
    write_images(images)
    im2rec = os.path.join(os.path.dirname(mx.__file__), "tools", "im2rec.py")
    prefix = os.path.join(OUT, "imgs")
    subprocess.check_call([sys.executable, im2rec, "--list", "--recursive", prefix, images])
    subprocess.check_call([sys.executable, im2rec, "--quality", "95", prefix, images])
    os.makedirs(os.path.join(OUT, "pass"), exist_ok=True)
    pprefix = os.path.join(OUT, "pass", "imgs_pass")
    with open(prefix + ".lst") as f, open(pprefix + ".lst", "w") as g:
        g.write(f.read())
    subprocess.check_call([sys.executable, im2rec, "--pass-through", pprefix, images])
    for ext in (".rec", ".idx"):
        os.replace(pprefix + ext, os.path.join(OUT, "imgs_pass" + ext))
    os.remove(pprefix + ".lst")
    os.rmdir(os.path.join(OUT, "pass"))

    it = mx.io.ImageRecordIter(path_imgrec=prefix + ".rec", path_imgidx=prefix + ".idx",
                               data_shape=(3, 24, 24), batch_size=6, shuffle=False,
                               preprocess_threads=1)
    batch = next(iter(it))
    data = batch.data[0].asnumpy()
    assert np.all(data == np.round(data)), "expected raw pixels"
    np.savez_compressed(os.path.join(OUT, "iter_expected.npz"),
                        data=data.astype(np.uint8), label=batch.label[0].asnumpy())
    write_resize_expected(prefix)
    print("written to", OUT)


def write_resize_expected(prefix):
    """MXNet's iterator with resize= (short side) then a centred crop."""
    import mxnet as mx
    it = mx.io.ImageRecordIter(path_imgrec=prefix + ".rec", path_imgidx=prefix + ".idx",
                               data_shape=(3, 16, 16), batch_size=6, shuffle=False,
                               resize=20, preprocess_threads=1)
    data = next(iter(it)).data[0].asnumpy()
    np.savez_compressed(os.path.join(OUT, "iter_resize_expected.npz"), data=data.astype(np.uint8))


if __name__ == "__main__":
    if sys.argv[1:] == ["--resize-only"]:  # the resize figures alone, files kept
        write_resize_expected(os.path.join(OUT, "imgs"))
    else:
        main()
