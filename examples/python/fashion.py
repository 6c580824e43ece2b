"""Fashion-MNIST from Debian's dataset-fashion-mnist package, as a torch Dataset: the Python
twin of examples/fashion/fashion_data.cc (the same files, normalisation and sample order).
Nothing is downloaded."""
import gzip
import os

import numpy as np
import torch

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"
# The training set's mean and standard deviation of a pixel (in [0, 1]).
MEAN, STD = 0.2860, 0.3530


def _read_idx(path, magic, count=0):
    """The big-endian dimensions of a gzip'd IDX file and its first `count` items (0: all) as a
    uint8 array of those dimensions."""
    try:
        f = gzip.open(path, "rb")
        header = f.read(4)
    except FileNotFoundError:
        raise FileNotFoundError(f"cannot open {path}: install Debian's Fashion-MNIST (apt-get "
                                f"install dataset-fashion-mnist) or pass --data DIR") from None
    with f:
        if int.from_bytes(header, "big") != magic:
            raise ValueError(f"{path} is not an IDX file of the expected kind")
        dims = [int.from_bytes(f.read(4), "big") for _ in range(magic & 0xFF)]
        n = dims[0] if count <= 0 else min(count, dims[0])
        item = int(np.prod(dims[1:], dtype=np.int64))
        data = f.read(n * item)
    if len(data) != n * item:
        raise ValueError(f"{path}: truncated data")
    return np.frombuffer(data, dtype=np.uint8).reshape([n] + dims[1:])


class FashionMnist(torch.utils.data.Dataset):
    """Split "train" (60,000 images) or "test" (10,000), optionally only the first `limit`.
    Sample i: {"image": float32 [1, 28, 28], normalised; "label": int64 scalar in [0, 10)}."""

    def __init__(self, split="train", limit=0, data_dir=DEFAULT_DIR):
        if split not in ("train", "test"):
            raise ValueError(f"unknown split '{split}' (expected train or test)")
        prefix = os.path.join(data_dir, "train" if split == "train" else "t10k")
        images = _read_idx(prefix + "-images-idx3-ubyte.gz", 0x803, limit)
        labels = _read_idx(prefix + "-labels-idx1-ubyte.gz", 0x801, limit)
        if images.shape[1:] != (28, 28) or len(images) != len(labels):
            raise ValueError(f"{prefix}-*: not the same number of 28 x 28 images and labels")
        self.images = torch.from_numpy(images.copy())  # uint8; normalised per sample
        self.labels = torch.from_numpy(labels.astype(np.int64))

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        image = (self.images[index].float().unsqueeze(0) / 255.0 - MEAN) / STD
        return {"image": image, "label": self.labels[index]}
