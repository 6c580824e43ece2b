#!/usr/bin/python3
"""A worker whose Python is busy in every direction at once, for the GIL test: segments that
spin in pure Python (holding the GIL) and hand their outputs to a Python thread, which drops
them and allocates tensors of its own in a loop, while mitra's C++ threads send activations,
write a checkpoint every step and beat the heart. After training it prints how often the
Python thread ran: it can run only while the training thread has released the GIL."""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import mitra  # noqa: E402
from models import Blobs, classify_loss  # noqa: E402

handed = []          # outputs of segments, dropped by the Python thread
iterations = [0]
done = threading.Event()


def background():
    while not done.is_set():
        while handed:
            handed.pop()  # the last reference to a tensor made in a segment
        sum(torch.ones(64) * 2)
        iterations[0] += 1


class Spinning(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.fc = nn.Linear(n_in, n_out)

    def forward(self, x):
        deadline = time.perf_counter() + 0.002
        while time.perf_counter() < deadline:  # pure Python, holding the GIL
            pass
        y = self.fc(x)
        handed.append(y)
        return y


spec = mitra.ModelSpec()
spec.add_segment("a", lambda: Spinning(8, 16), input="x")
spec.add_segment("b", lambda: Spinning(16, 16), input="hidden")
spec.add_segment("c", lambda: Spinning(16, 4), input="hidden")
spec.loss = classify_loss

thread = threading.Thread(target=background, daemon=True)
thread.start()
code = mitra.Trainer(spec, Blobs(), batch_size=32, chunk_size=8, max_steps=30, lr=0.05,
                     log_every=0).run()
done.set()
thread.join()
print(f"background thread iterations: {iterations[0]}", flush=True)
sys.exit(code)
