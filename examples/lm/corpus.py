"""The corpus: the King James Bible as Debian's bible-kjv package ships it, as bytes.

`bible -l 1000 Gen1:1-Rev22:21` prints every verse on a line of its own, numbered, under a
heading per chapter; the verses' text, one per line, is the corpus (4.3 MB, 31,102 verses).
Tokens are bytes (a vocabulary of 256): no tokenizer to install, and every backend and layout
sees the same token ids. The last 10 % of the text is held out for validation.

Batches are a function of (seed, step) alone: a step's global batch is `batch` windows of
`seq + 1` bytes at offsets drawn from a generator seeded with (seed, step), so every backend,
layout and rank count trains on the same data in the same order; a data-parallel rank takes
its contiguous slice of the global batch.
"""
import os
import re
import shutil
import subprocess

import torch

VERSE = re.compile(rb"^\s+\d+ (.*)$")
CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "plait")


def kjv_bytes(cache_dir=CACHE):
    """The corpus as bytes, from the bible program (cached as kjv.txt in cache_dir)."""
    path = os.path.join(cache_dir, "kjv.txt")
    if os.path.exists(path):
        with open(path, "rb") as f:
            return f.read()
    bible = shutil.which("bible")
    if bible is None:
        raise RuntimeError("the corpus comes from Debian's bible-kjv package (the `bible` "
                           "program): apt-get install bible-kjv (make build installs it)")
    out = subprocess.run([bible, "-l", "1000", "Gen1:1-Rev22:21"], check=True,
                         capture_output=True).stdout
    verses = [m.group(1).strip() for line in out.splitlines() if (m := VERSE.match(line))]
    text = b"\n".join(verses) + b"\n"
    os.makedirs(cache_dir, exist_ok=True)
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(text)
    os.replace(tmp, path)
    return text


class Corpus:
    """Training and validation token streams (uint8 tensors) and their batches."""

    def __init__(self, text, val_fraction=0.1):
        data = torch.frombuffer(bytearray(text), dtype=torch.uint8)
        cut = int(len(data) * (1 - val_fraction))
        self.train, self.val = data[:cut], data[cut:]

    @staticmethod
    def _windows(stream, offsets, seq):
        rows = torch.stack([stream[o:o + seq + 1] for o in offsets.tolist()]).long()
        return rows[:, :-1], rows[:, 1:]  # inputs, next-byte targets

    def train_batch(self, seed, step, batch, seq, part=0, parts=1):
        """The global batch of `step` (inputs, targets: batch x seq), or its slice `part` of
        `parts` (a data-parallel rank's share; batch must divide evenly)."""
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        offsets = torch.randint(0, len(self.train) - seq - 1, (batch,), generator=g)
        share = batch // parts
        return self._windows(self.train, offsets[part * share:(part + 1) * share], seq)

    def val_batches(self, count, batch, seq):
        """`count` fixed validation batches, evenly spaced over the held-out text."""
        span = len(self.val) - seq - 1
        starts = torch.linspace(0, span - 1, count * batch).long().view(count, batch)
        return [self._windows(self.val, s, seq) for s in starts]
