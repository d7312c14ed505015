#!/usr/bin/env python3
"""stoker's Python adapters against the framework loaders they replace, same machine, same run.

    PYTHONPATH=python python3 bench/python_peers.py --suite torch [--data DIR] [--workers 1,2] \
        [--image-size 224] [--batch-size 32] [--epochs 2] [--repeat 1] [--json FILE]

Suites (--suite, one or more, comma-separated):

torch: the torchvision ImageNet training pipeline
         transforms.Compose([RandomResizedCrop(224), RandomHorizontalFlip(), ToTensor(),
                             Normalize(IMAGENET_MEAN, IMAGENET_STD)])
       through torch.utils.data.DataLoader(ImageFolder(DIR), batch_size, shuffle=True,
       num_workers=W, persistent_workers=True), against
         stoker.torch.DataLoader(DIR, 224, batch_size, num_workers=W, normalize='imagenet',
             augment=stoker.Augment(random_resized_crop=True, horizontal_flip=True))
       (the same work: decode, random resized crop with torchvision's defaults, flip, float32
       NCHW, ImageNet normalisation; stoker does it on W C++ threads, torchvision in W worker
       processes), and stoker with cache='decoded' (decoded images kept in memory after the first
       epoch: the augmentation still runs every epoch). W is the same for both in each row.
       --pin-memory: pin_memory=True on both, and on a machine with a GPU every batch copied to it
       with .to('cuda', non_blocking=True) (the copy a training step starts with) and the copies
       waited for at the end; without a GPU both loaders alone (pinning needs a device).
keras: the seed's ImageDataGenerator (rotation 30, shifts 0.4, shear 0.4, zoom 0.25, horizontal
       flip, brightness [0.5, 1.5], rescale 1/255) through flow_from_directory, tf_keras' against
       stoker.keras', batch 8 and 32, one core and all cores (run it with --image-size 299, the
       seed's size); then model.fit epoch time of the seed's recipe (frozen MobileNetV2 0.35 at
       224 + Dense(1, sigmoid)) on each, with fit's default shuffle=True (Keras asks a Sequence's
       batches in a random order) and with shuffle=False (in order). Needs tf_keras; each figure in
       its own child process.
keras-generator: the generator rows of the keras suite alone (no model).
keras-dataset: Keras 3's keras.utils.image_dataset_from_directory against
       stoker.keras.image_dataset_from_directory (decode + bilinear resize to --image-size, float32
       batches of --batch-size, shuffled, binary labels; tf.data consumes both), all cores; each
       figure in its own child process. Needs Keras 3 with TensorFlow.
keras-fit: model.fit epoch time of a tiny model (Conv2D(8, 3, stride 2) + pooling + Dense(1)) at
       --image-size on the seed's generator, tf_keras' and stoker.keras', with fit's default
       shuffle=True and with shuffle=False: what the loader costs a step when the model costs
       almost nothing (stoker.keras pipelines both orders). Each figure in its own child process.

Each measurement: one warm-up epoch (worker start-up, page cache, stoker's pools, the decoded
cache's fill) that is not timed, then --epochs timed epochs; img/s = images delivered / seconds.
The consumer touches one value per batch (the loop a training step would be) and does nothing
else. With --repeat R the rows are measured R times in turns and the median is printed.
Prints a table and, per W, the ratio stoker / torchvision, with the 1-minute load average before
and after (a busy machine makes the figures meaningless); --json FILE writes the numbers.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

DEFAULT_DATA = "/work/shared/data/catsdogs"


def touch(images):
    images[0, 0, 0, 0].item()


def timed_epochs(make_iter, epochs, consume=touch, finish=None):
    """(images, seconds) over `epochs` epochs after one warm-up epoch; make_iter(epoch) gives the
    epoch's iterable of (images, labels), consume(images) is the training step's use of a batch
    and finish() waits for what it queued."""
    for images, _ in make_iter(0):
        consume(images)
    if finish:
        finish()
    n = 0
    t0 = time.perf_counter()
    for e in range(1, epochs + 1):
        for images, _ in make_iter(e):
            consume(images)
            n += images.shape[0]
    if finish:
        finish()
    return n, time.perf_counter() - t0


# ---------------------------------------------------------------------------------- torch suite
def torch_suite(args):
    try:
        import torch
        import torchvision
        from torchvision import transforms as T
    except ImportError as e:
        print(f"torch suite skipped: PyTorch/torchvision not installed ({e})", file=sys.stderr)
        return None
    import stoker
    import stoker.torch

    torch.set_num_threads(1)  # the main process only consumes; the workers do the work
    size, batch = args.image_size, args.batch_size
    mean, std = stoker.torch.IMAGENET_MEAN, stoker.torch.IMAGENET_STD
    # --pin-memory: both loaders with pin_memory=True, and where there is a GPU each batch copied to
    # it with .to('cuda', non_blocking=True), as a training loop does (without one, the loaders
    # alone: both warn that pinning needs a device and keep pageable batches).
    pin = args.pin_memory
    consume, finish = touch, None
    if pin and torch.cuda.is_available():
        def consume(images):
            images.to("cuda", non_blocking=True)

        finish = torch.cuda.synchronize

    def torchvision_run(w):
        tf = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(mean, std)])
        ds = torchvision.datasets.ImageFolder(args.data, transform=tf)
        dl = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=w,
                                         persistent_workers=w > 0, drop_last=False, pin_memory=pin)
        try:
            return timed_epochs(lambda e: dl, args.epochs, consume, finish)
        finally:
            del dl

    def stoker_run(w, cache=None):
        dl = stoker.torch.DataLoader(
            args.data, size, batch_size=batch, shuffle=True, num_workers=w, cache=cache, normalize="imagenet",
            pin_memory=pin, augment=stoker.Augment(random_resized_crop=True, horizontal_flip=True))

        def epoch(e):
            dl.set_epoch(e)
            return dl

        try:
            return timed_epochs(epoch, args.epochs, consume, finish)
        finally:
            dl.close()

    load_before = os.getloadavg()
    rows = {}
    for w in args.workers:
        rows[w] = {"torchvision": [], "stoker": [], "stoker_decoded_cache": []}
    for rep in range(args.repeat):
        for w in args.workers:
            for name, run in (("torchvision", lambda: torchvision_run(w)),
                              ("stoker", lambda: stoker_run(w)),
                              ("stoker_decoded_cache", lambda: stoker_run(w, cache="decoded"))):
                n, s = run()
                rows[w][name].append(n / s)
                print(f"  [{rep + 1}/{args.repeat}] W={w} {name}: {n} images in {s:.2f} s = {n / s:.1f} img/s",
                      file=sys.stderr, flush=True)

    load_after = os.getloadavg()
    result = {
        "suite": "torch",
        "load_average_before_after": [load_before, load_after],
        "data": args.data,
        "image_size": size,
        "batch_size": batch,
        "pin_memory": pin,
        "copied_to": "cuda" if finish else None,
        "epochs_timed": args.epochs,
        "repeat": args.repeat,
        "versions": {"torch": torch.__version__, "torchvision": torchvision.__version__,
                     "stoker": stoker.__version__},
        "rows": [],
    }
    copies = ("pin_memory=True, every batch copied to the GPU" if finish
              else "pin_memory=True (no GPU: the loaders alone)" if pin else "the loaders alone")
    print(f"\ntorch suite: {args.data}, {size}x{size}, batch {batch}, {args.epochs} timed epoch(s) after a warm-up,"
          f" median of {args.repeat}; {copies}; {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}")
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, stoker {stoker.__version__}; "
          f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after (other work on the machine skews W > 1)")
    print(f"{'W':>3} {'torchvision img/s':>18} {'stoker img/s':>13} {'ratio':>7} {'stoker decoded-cache img/s':>27} {'ratio':>7}")
    for w in args.workers:
        tv = statistics.median(rows[w]["torchvision"])
        st = statistics.median(rows[w]["stoker"])
        sc = statistics.median(rows[w]["stoker_decoded_cache"])
        print(f"{w:>3} {tv:>18.1f} {st:>13.1f} {st / tv:>6.2f}x {sc:>27.1f} {sc / tv:>6.2f}x")
        result["rows"].append({"workers": w, "torchvision_img_per_s": tv, "stoker_img_per_s": st,
                               "stoker_decoded_cache_img_per_s": sc, "ratio": st / tv,
                               "ratio_decoded_cache": sc / tv, "runs": rows[w]})
    return result


# ---------------------------------------------------------------------------------- keras suite
# The seed's generator: what the cats-vs-dogs script this project replaces feeds model.fit with.
SEED_GENERATOR = dict(rotation_range=30, width_shift_range=0.4, height_shift_range=0.4, shear_range=0.4,
                      zoom_range=0.25, horizontal_flip=True, brightness_range=[0.5, 1.5], rescale=1 / 255)


def _generator_class(which):
    if which == "keras":
        from tf_keras.preprocessing.image import ImageDataGenerator
    else:
        from stoker.keras import ImageDataGenerator
    return ImageDataGenerator


def _dataset_measure(args):
    """Keras 3's image_dataset_from_directory (which='keras') or stoker.keras' (which='stoker'):
    img/s over --epochs passes after a warm-up pass, the consumer touching one value per batch."""
    import keras
    if args.which == "keras":
        load = keras.utils.image_dataset_from_directory
    else:
        from stoker.keras import image_dataset_from_directory as load
    ds = load(args.data, image_size=(args.image_size, args.image_size), batch_size=args.batch_size, seed=1,
              label_mode="binary", verbose=False)
    for images, _ in ds:  # warm-up pass: imports, tf.data's threads, stoker's pools, the page cache
        images[0, 0, 0, 0].numpy()
    n, t0 = 0, time.perf_counter()
    for _ in range(args.epochs):
        for images, _ in ds:
            images[0, 0, 0, 0].numpy()
            n += int(images.shape[0])
    print(json.dumps({"img_per_s": n / (time.perf_counter() - t0), "keras": keras.__version__}))


def keras_measure(args):
    """One measurement in this (child) process, printed as JSON: the generator alone, fit, or the
    image_dataset_from_directory pipeline."""
    if args.measure == "dataset":
        _dataset_measure(args)
        return
    import numpy as np  # noqa: F401  (imported before timing, as TensorFlow is)
    gen = _generator_class(args.which)(**SEED_GENERATOR)
    it = gen.flow_from_directory(args.data, target_size=(args.image_size, args.image_size),
                                 batch_size=args.batch_size, class_mode="binary", seed=1)
    if args.measure == "generator":
        for i in range(2):  # warm-up: imports, pools, the first prefetch
            it[i]
        n, t0 = 0, time.perf_counter()
        for _ in range(args.epochs):
            it.on_epoch_end()
            for i in range(len(it)):
                x, _ = it[i]
                n += x.shape[0]
        print(json.dumps({"img_per_s": n / (time.perf_counter() - t0)}))
        return
    import tf_keras
    if args.measure.startswith("tiny"):
        model = tf_keras.Sequential([
            tf_keras.layers.Input((args.image_size, args.image_size, 3)),
            tf_keras.layers.Conv2D(8, 3, strides=2, activation="relu"),
            tf_keras.layers.GlobalAveragePooling2D(),
            tf_keras.layers.Dense(1, activation="sigmoid"),
        ])
    else:
        shared = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "models")
        full = tf_keras.models.load_model(os.path.join(shared, "mobilenet_v2_0.35_224_3class.h5"), compile=False)
        backbone = full.layers[0]  # MobileNetV2 cut at out_relu + GlobalAveragePooling2D
        backbone.trainable = False
        model = tf_keras.Sequential([backbone, tf_keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])

    class EpochTimes(tf_keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.t0 = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            times.append(time.perf_counter() - self.t0)

    times = []
    # fit: Keras' default (shuffle=True: the batches of a Sequence asked in a random order, i.e.
    # random access); fit_in_order: shuffle=False (the iterator still shuffles its files each
    # epoch), the order stoker.keras pipelines.
    model.fit(it, epochs=1 + args.epochs, steps_per_epoch=len(it), verbose=0, callbacks=[EpochTimes()],
              shuffle=not args.measure.endswith("in_order"))
    print(json.dumps({"epoch_seconds": statistics.median(times[1:]), "images": it.samples,
                      "pipelined_batches": getattr(it, "pipelined_batches", None)}))


def _child(args, which, measure, batch, cpus):
    import subprocess
    cmd = [sys.executable, os.path.abspath(__file__), "--suite", "keras-measure", "--which", which, "--measure",
           measure, "--data", args.data,
           "--image-size", str(args.image_size if measure in ("generator", "dataset") or measure.startswith("tiny")
                               else 224),
           "--batch-size", str(batch), "--epochs", str(args.epochs)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    pre = (lambda: os.sched_setaffinity(0, set(range(cpus)))) if cpus else None
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, preexec_fn=pre, timeout=3600)
    if run.returncode != 0:
        raise RuntimeError(f"{which} {measure}: {run.stderr[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def _generator_rows(args, result):
    """The generator alone: tf_keras' against stoker.keras', batch 8 and 32, one core and all."""
    cores = len(os.sched_getaffinity(0))
    print(f"keras generator: {args.data}, {args.image_size}x{args.image_size}, seed generator {SEED_GENERATOR}, "
          f"{cores} cores, load average {os.getloadavg()[0]:.2f}")
    print(f"{'batch':>5} {'cores':>5} {'tf_keras img/s':>15} {'stoker.keras img/s':>19} {'ratio':>7}")
    for batch in (8, 32):
        for cpus in (1, cores):
            runs = {"keras": [], "stoker": []}
            for _ in range(args.repeat):
                for which in ("keras", "stoker"):
                    runs[which].append(_child(args, which, "generator", batch, cpus)["img_per_s"])
            k, st = statistics.median(runs["keras"]), statistics.median(runs["stoker"])
            print(f"{batch:>5} {cpus:>5} {k:>15.1f} {st:>19.1f} {st / k:>6.2f}x")
            result["generator"].append({"batch": batch, "cores": cpus, "tf_keras_img_per_s": k,
                                        "stoker_keras_img_per_s": st, "ratio": st / k, "runs": runs})


def _keras_result():
    return {"machine": platform.processor() or platform.machine(), "cores": len(os.sched_getaffinity(0)),
            "load_before": os.getloadavg()[0], "generator": []}


def keras_generator_suite(args):
    """The generator half of the keras suite alone (no model): the seed's ImageDataGenerator
    through flow_from_directory, tf_keras' against stoker.keras'."""
    try:
        import tf_keras  # noqa: F401
        import stoker.keras  # noqa: F401
    except ImportError as e:
        print(f"keras-generator suite: skipped ({e})", file=sys.stderr)
        return None
    result = _keras_result()
    _generator_rows(args, result)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return result


def keras_dataset_suite(args):
    """Keras 3's keras.utils.image_dataset_from_directory against stoker.keras' (decode + bilinear
    resize to --image-size, float32 batches of --batch-size, binary labels, shuffled), all cores,
    each figure in its own child process, in turns, --repeat rounds, medians printed."""
    try:
        import keras
        import stoker.keras  # noqa: F401
    except ImportError as e:
        print(f"keras-dataset suite: skipped ({e})", file=sys.stderr)
        return None
    if not keras.__version__.startswith("3"):
        print(f"keras-dataset suite: skipped (Keras {keras.__version__}, not Keras 3)", file=sys.stderr)
        return None
    result = _keras_result()
    print(f"keras-dataset suite: {args.data}, {args.image_size}x{args.image_size}, batch {args.batch_size}, "
          f"Keras {keras.__version__}, {result['cores']} cores, load average {os.getloadavg()[0]:.2f}")
    runs = {"keras": [], "stoker": []}
    for _ in range(args.repeat):
        for which in ("keras", "stoker"):
            runs[which].append(_child(args, which, "dataset", args.batch_size, None)["img_per_s"])
    k, st = statistics.median(runs["keras"]), statistics.median(runs["stoker"])
    print(f"image_dataset_from_directory img/s: Keras {k:.1f}, stoker.keras {st:.1f} ({st / k:.2f}x)")
    result.update(keras_img_per_s=k, stoker_img_per_s=st, ratio=st / k, runs=runs,
                  load_after=os.getloadavg()[0])
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return result


def keras_suite(args):
    """The seed's ImageDataGenerator.flow_from_directory (tf_keras') against stoker.keras', at
    --image-size (the seed's 299), batch 8 and 32, on one core (both processes pinned to CPU 0)
    and on all cores; then model.fit epoch time of the seed's recipe (frozen MobileNetV2 0.35 at
    224 + Dense(1, sigmoid), batch 32) on each generator. Every figure is measured in its own
    child process, in turns (keras, stoker) for --repeat rounds; the medians are printed."""
    try:
        import tf_keras  # noqa: F401
        import stoker.keras  # noqa: F401
    except ImportError as e:
        print(f"keras suite: skipped ({e})", file=sys.stderr)
        return None
    cores = len(os.sched_getaffinity(0))
    result = dict(_keras_result(), fit={}, fit_in_order={})
    _generator_rows(args, result)
    for measure, key, note in (("fit", "fit", "fit(shuffle=True), Keras' default: batches in random order"),
                               ("fit_in_order", "fit_in_order", "fit(shuffle=False): batches in order")):
        fit = {"keras": [], "stoker": []}
        for _ in range(args.repeat):
            for which in ("keras", "stoker"):
                fit[which].append(_child(args, which, measure, 32, None)["epoch_seconds"])
        k, st = statistics.median(fit["keras"]), statistics.median(fit["stoker"])
        print(f"model.fit epoch (frozen MobileNetV2 0.35 at 224, batch 32, {cores} cores, {note}): tf_keras "
              f"generator {k:.2f} s, stoker.keras {st:.2f} s, {k / st:.2f}x faster")
        result[key] = {"tf_keras_epoch_seconds": k, "stoker_keras_epoch_seconds": st, "speedup": k / st,
                       "runs": fit}
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return result


def keras_fit_suite(args):
    """model.fit epoch time of a tiny model on the seed's generator (tf_keras' and stoker.keras'),
    with fit's default shuffle=True and with shuffle=False, batch --batch-size, all cores; each
    figure in its own child process, in turns, --repeat rounds, medians printed."""
    try:
        import tf_keras  # noqa: F401
        import stoker.keras  # noqa: F401
    except ImportError as e:
        print(f"keras-fit suite: skipped ({e})", file=sys.stderr)
        return None
    cores = len(os.sched_getaffinity(0))
    result = {"machine": platform.processor() or platform.machine(), "cores": cores, "image_size": args.image_size,
              "batch": args.batch_size, "load_before": os.getloadavg()[0]}
    print(f"keras-fit suite: {args.data}, {args.image_size}x{args.image_size}, batch {args.batch_size}, tiny model, "
          f"{cores} cores, load average {os.getloadavg()[0]:.2f}")
    for measure, note in (("tiny", "fit(shuffle=True), Keras' default"), ("tiny_in_order", "fit(shuffle=False)")):
        runs = {"keras": [], "stoker": []}
        served = None
        for _ in range(args.repeat):
            for which in ("keras", "stoker"):
                out = _child(args, which, measure, args.batch_size, None)
                runs[which].append(out["epoch_seconds"])
                if which == "stoker":
                    served = out["pipelined_batches"]
        k, st = statistics.median(runs["keras"]), statistics.median(runs["stoker"])
        print(f"{note:<36} epoch: tf_keras generator {k:.2f} s, stoker.keras {st:.2f} s ({k / st:.2f}x; "
              f"stoker's pipeline served {served} batches)")
        result[measure] = {"tf_keras_epoch_seconds": k, "stoker_keras_epoch_seconds": st, "runs": runs,
                           "stoker_pipelined_batches": served}
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return result


SUITES = {"torch": torch_suite, "keras": keras_suite, "keras-generator": keras_generator_suite,
          "keras-fit": keras_fit_suite, "keras-dataset": keras_dataset_suite, "keras-measure": keras_measure}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default="torch", help=f"comma-separated: {', '.join(SUITES)}")
    ap.add_argument("--data", default=DEFAULT_DATA, help="a folder of class folders")
    ap.add_argument("--workers", default="1,2", help="comma-separated worker/thread counts W")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--pin-memory", action="store_true",
                    help="torch suite: pin_memory=True on both loaders, each batch copied to the GPU when there is one")
    ap.add_argument("--epochs", type=int, default=2, help="timed epochs after the warm-up epoch")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", help="also write the numbers to this file")
    ap.add_argument("--which", choices=["keras", "stoker"], help=argparse.SUPPRESS)  # keras-measure (a child)
    ap.add_argument("--measure", choices=["generator", "fit", "fit_in_order", "tiny", "tiny_in_order", "dataset"],
                    help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.suite == "keras-measure":
        keras_measure(args)
        return 0
    suites = [s.strip() for s in args.suite.split(",") if s.strip()]
    unknown = [s for s in suites if s not in SUITES]
    if unknown:
        ap.error(f"unknown suite(s) {unknown}; choose from {sorted(SUITES)}")
    args.workers = [int(w) for w in args.workers.split(",")]
    if min(args.workers) < 1 or min(args.image_size, args.batch_size, args.epochs, args.repeat) < 1:
        ap.error("--workers, --image-size, --batch-size, --epochs and --repeat must be >= 1")
    if not os.path.isdir(args.data):
        ap.error(f"--data {args.data}: no such folder")
    results = {}
    for s in suites:
        r = SUITES[s](args)
        if r is not None:
            results[s] = r
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if results else 3


if __name__ == "__main__":
    sys.exit(main())
