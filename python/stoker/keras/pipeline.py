"""The epoch pipeline: in-order batches of a file iterator from one persistent stoker Loader."""

from __future__ import annotations

import numpy as np

from ._decode import open_loader

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
        # Batches decoded ahead: up to 4, within about 256 MB of batch buffers.
        prefetch = int(min(4, max(2, (256 << 20) // max(1, sample_bytes * it.batch_size))))
        self.loader = open_loader(paths, (h, w), it.interpolation, it.keep_aspect_ratio, it.batch_size, prefetch,
                                  augment=spec, seed=it._aug_seed)
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
        view = batch.images
        if self.mode == "fused" and view.dtype != self.dtype:
            images = view.astype(self.dtype)
        else:
            images = np.array(view, copy=True)
        positions = np.asarray(batch.sample_ids, dtype=np.int64)
        del view, batch  # the buffer goes back to the loader's pool
        idx = self.next_idx
        self.next_idx += 1
        if self.next_idx >= self.batches:  # every batch made: free the buffers and the threads now
            self.alive = False
            loader, self.loader = self.loader, None
            loader.close()
        return idx, images, self.order[positions]

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
