"""The epoch pipeline: a file iterator's batches, prepared ahead by stoker Loaders, in order
(_EpochPipeline: one persistent Loader) or in the order Keras' fit will ask for them
(_FitOrderPipeline: a Loader resumed at each batch)."""

from __future__ import annotations

import re

import numpy as np

from ._common import _cpu_count
from ._decode import open_loader


def _epoch_loader(it, order, mode, prefetch=None, threads=None):
    """(loader, fused): stoker's Loader over the epoch's files in index_array order (`order`), as
    every pipeline of the iterator makes it, so that batch k holds the same pixels whichever
    pipeline makes it (the augmentation draws are keyed by (seed, epoch, position in the epoch))."""
    h, w = (int(v) for v in it.target_size)
    paths = [it.filepaths[int(j)] for j in order]
    spec = None
    sample_bytes = h * w * 3
    if mode == "fused":
        gen = it.image_data_generator
        spec = gen._spec(h, w, 3, True, it.data_format, gen._feature_channels(3))
        if it.keep_aspect_ratio:
            spec.center_crop = (1.0, True)
        sample_bytes *= 4  # float32
    if prefetch is None:  # batches decoded ahead: up to 4, within about 256 MB of batch buffers
        prefetch = int(min(4, max(2, (256 << 20) // max(1, sample_bytes * it.batch_size))))
    return open_loader(paths, (h, w), it.interpolation, it.keep_aspect_ratio, it.batch_size, prefetch,
                       augment=spec, seed=it._aug_seed, threads=threads)


def _copy_out(batch, mode, dtype, order):
    """(images, index_array) of a Loader batch, copied out of its pooled buffer."""
    view = batch.images
    if mode == "fused" and view.dtype != dtype:
        images = view.astype(dtype)
    else:
        images = np.array(view, copy=True)
    positions = np.asarray(batch.sample_ids, dtype=np.int64)
    del view
    return images, order[positions]

class _EpochPipeline:
    """One epoch of a file iterator served in order by one persistent stoker Loader.

    The Loader runs over the epoch's files in index_array order (shuffle=False), `prefetch`
    batches ahead on stoker's threads. Mode 'fused': the generator's augmentation, rescale and
    standardisation are the Loader's transform (one pass from the decoded source, float32 out,
    JPEGs DCT-scaled); draws keyed by (iterator seed, epoch, position in the epoch). Mode
    'decode': the Loader makes the exact path's uint8 pixels (Pillow-exact resize, full-size
    JPEG decode) and the iterator finishes them as the exact path does."""

    # Batches a request may run ahead of the next one (concurrent in-order callers, e.g. Keras'
    # OrderedEnqueuer threads): the ones in between are held until asked for.
    window = 8

    def __init__(self, it, epoch, order, mode):
        self.epoch = epoch
        self.order = order
        self.mode = mode
        self.batch_size = it.batch_size
        self.batches = (len(order) + it.batch_size - 1) // it.batch_size
        self.next_idx = 0
        self.held: dict = {}
        self.last = None  # (idx, images, index_array) of the last batch served, for a repeat
        self.alive = True
        self.failed = False
        self.dtype = np.dtype(it.dtype)
        self.loader = _epoch_loader(it, order, mode)
        self.loader.begin_epoch(max(int(epoch), 0))

    def close(self):
        self.alive = False
        self.held.clear()
        loader, self.loader = self.loader, None
        if loader is not None:
            loader.close()

    def _pull(self):
        """The loader's next batch as (images, index_array), copied out of its pooled buffer."""
        try:
            batch = self.loader.next()
        except Exception:
            self.failed = True
            self.close()
            raise
        if batch is None:  # pragma: no cover - the count says there is one
            raise RuntimeError("stoker.keras: the epoch's loader ended early")
        images, index_array = _copy_out(batch, self.mode, self.dtype, self.order)
        del batch  # the buffer goes back to the loader's pool
        idx = self.next_idx
        self.next_idx += 1
        if self.next_idx >= self.batches:  # every batch made: free the buffers and the threads now
            self.alive = False
            loader, self.loader = self.loader, None
            loader.close()
        return idx, images, index_array

    def take(self, idx):
        """(images, index_array, fused) of batch idx, or None when it is not in this pipeline's
        reach (behind it, too far ahead, or the pipeline closed)."""
        got = self.held.pop(idx, None)
        if got is None and self.last is not None and self.last[0] == idx:
            got = (self.last[1].copy(), self.last[2])  # the same batch asked twice: the same pixels
            return got + (self.mode == "fused",)
        if got is None:
            if not self.alive or not self.next_idx <= idx < self.next_idx + self.window:
                return None
            while True:
                k, images, index_array = self._pull()
                if k == idx:
                    got = (images, index_array)
                    break
                self.held[k] = (images, index_array)
        self.last = (idx, got[0], got[1])
        return got + (self.mode == "fused",)


class _FitOrderPipeline:
    """One epoch of a file iterator served in the order Keras' fit asks for its batches
    (fit(shuffle=True): a permutation of the batch indices, known before its first request).

    Batch k is batch k of the epoch's Loader over the files in index_array order, the same
    Loader _EpochPipeline runs (the same pixels and draws), started at k with resume(). `lanes`
    Loaders take turns: the lane of position r of the order decodes batch order[r] while the
    batches before it are used; after serving it the lane is resumed at position r + lanes while it
    still holds both of its buffers, then gives back the older one, so a Loader decodes only the
    batches it is asked for (a Loader's second buffer otherwise runs on to batch k + 1)."""

    lanes = 2

    def __init__(self, it, epoch, order, mode, batch_order):
        self.epoch = epoch
        self.order = order
        self.mode = mode
        self.dtype = np.dtype(it.dtype)
        self.batch_order = [int(k) for k in batch_order]
        self.position = {k: r for r, k in enumerate(self.batch_order)}
        self.last = None  # (idx, images, index_array) of the last batch served, for a repeat
        self.alive = True
        self.failed = False
        lanes = max(1, min(self.lanes, len(self.batch_order)))
        self.loaders = [None] * lanes
        self.assigned = [None] * lanes  # the position of the order each lane is decoding
        self.kept = [None] * lanes  # the batch each lane last delivered (holds one of its two buffers)
        try:
            for lane in range(lanes):
                self.loaders[lane] = _epoch_loader(it, order, mode, prefetch=1, threads=_cpu_count())
            state = self.loaders[0].state()  # "stoker-loader-state 1 seed=.. epoch=.. next_batch=.. ..."
            self._state = re.sub(r"\bepoch=\d+", f"epoch={max(int(epoch), 0)}", state)
            for lane in range(lanes):
                self._assign(lane, lane)
        except Exception:
            self.close()
            raise

    def _assign(self, lane, r):
        """Lane `lane` decodes position r of the order next (closes the lane past the end)."""
        loader = self.loaders[lane]
        if r >= len(self.batch_order):
            self.assigned[lane] = None
            self.kept[lane] = None
            self.loaders[lane] = None
            loader.close()
            if all(v is None for v in self.loaders):
                self.alive = False
            return
        loader.resume(re.sub(r"\bnext_batch=\d+", f"next_batch={self.batch_order[r]}", self._state))
        self.assigned[lane] = r
        self.kept[lane] = None  # the older buffer back to the Loader: it takes batch order[r]

    def close(self):
        self.alive = False
        self.kept = [None] * len(self.kept)
        loaders, self.loaders = self.loaders, [None] * len(self.loaders)
        for loader in loaders:
            if loader is not None:
                loader.close()

    def take(self, idx):
        """(images, index_array, fused) of batch idx, or None when this pipeline does not have it
        prepared (not in the order, not yet a lane's, or the pipeline closed)."""
        if self.last is not None and self.last[0] == idx:
            return self.last[1].copy(), self.last[2], self.mode == "fused"
        r = self.position.get(int(idx))
        if not self.alive or r is None:
            return None
        lane = r % len(self.loaders)
        if self.assigned[lane] != r or self.loaders[lane] is None:
            return None
        try:
            batch = self.loaders[lane].next()
            if batch is None or int(batch.index) != int(idx):  # pragma: no cover - resume() says which
                raise RuntimeError(f"stoker.keras: the loader delivered batch {None if batch is None else batch.index}"
                                   f" for batch {idx}")
            images, index_array = _copy_out(batch, self.mode, self.dtype, self.order)
            self._assign(lane, r + len(self.loaders))  # while both buffers are held: nothing decoded unasked
            if self.loaders[lane] is not None:
                self.kept[lane] = batch
            del batch
        except Exception:
            self.failed = True
            self.close()
            raise
        self.last = (idx, images, index_array)
        return images, index_array, self.mode == "fused"
