"""stoker.keras: a drop-in replacement for Keras' ImageDataGenerator.

    from stoker.keras import ImageDataGenerator      # instead of tf_keras.preprocessing.image
    gen = ImageDataGenerator(rescale=1 / 255, rotation_range=30, horizontal_flip=True,
                             validation_split=0.2)
    train = gen.flow_from_directory("data", target_size=(150, 150), subset="training")
    val = gen.flow_from_directory("data", target_size=(150, 150), subset="validation")
    model.fit(train, validation_data=val)

The constructor and the methods (flow, flow_from_directory, flow_from_dataframe, fit,
standardize, get_random_transform, apply_transform, random_transform) take the same arguments
with the same defaults and meaning as tf_keras' ImageDataGenerator. The iterators subclass the
Sequence class of every Keras installed -- tf_keras.utils.Sequence and Keras 3's
keras.utils.PyDataset (KERAS_FLAVOURS names them) -- so that model.fit, evaluate and predict of
either Keras take them, whichever Keras the model belongs to. They carry Keras' attributes
(class_indices, classes, filenames, filepaths, labels, samples, n, batch_size, num_classes,
image_shape, index_array, ...). Class order, file order, the validation split, the shuffle order
of the first epoch (for a given seed), label arrays and batch dtypes/shapes are Keras'.

Keras 3's loader has its equivalent too: image_dataset_from_directory (module dataset) takes
keras.utils.image_dataset_from_directory's arguments and returns a tf.data.Dataset with the same
files, order (per pass), split, labels and element specs, decoded and resized by stoker's C++
Loader (bilinear within 1 grey level of tf.image.resize, nearest equal; settings it does not decode
natively are served by Keras' own function, with a warning).

Modules: generator (ImageDataGenerator), dataset (image_dataset_from_directory), iterators (Iterator, DirectoryIterator,
DataFrameIterator, NumpyArrayIterator), pipeline (the epoch pipeline of 4.), _decode (Pillow's
load_img, and open_loader: the one stoker Loader every C++ decode of files goes through, the
exact path's and the pipeline's alike), _transform (Keras' apply_transform in NumPy/SciPy) and
_common (the Keras flavours, the thread pool).

How a batch is made
-------------------
1. Decoding (files) -- by default (decoder=None) stoker's C++ Loader decodes whenever it can:
   color_mode='rgb' and any Keras interpolation (nearest, bilinear, bicubic, lanczos, box,
   hamming: Pillow's resize re-implemented in C++, keep_aspect_ratio as Keras' box), with JPEGs
   decoded at full size as PIL does (dct_scaling=False). Otherwise (color_mode 'grayscale' or
   'rgba') Pillow decodes each file exactly as Keras' load_img does, on a thread pool.
   decoder='pil' or decoder='stoker' forces one. The C++ path equals Keras' pixels except where
   Pillow (13.x) runs its resize passes vertical-first while shrinking both ways (a rule stoker
   has not reproduced): there bilinear/box/hamming differ by at most 1 grey level and
   bicubic/lanczos by more; and PNGs/JPEGs whose PIL conversion to RGB differs from OpenCV's/
   TurboJPEG's (16-bit PNGs, CMYK JPEGs) differ too. decoder='pil' is pixel-identical always.
   Arrays given to flow() are used as they are.
2. Augmentation, rescale and standardisation run in C++ (stoker.Augmenter.apply_batch, on
   stoker's threads, GIL released) on the uint8 images: one call per batch, producing the
   float32 batch in the requested data_format. When a preprocessing_function is given, C++
   produces the augmented float images, then preprocessing_function and Keras' standardize
   (rescale, sample-wise, feature-wise) run per image in NumPy, in Keras' order.
   Featurewise statistics that are not per channel (a user-set per-pixel `mean`) are applied in
   NumPy too.
3. Random access: `__getitem__(i)` works in any order (Keras Sequence semantics): batch i of
   the epoch is index_array[i*batch_size:(i+1)*batch_size]; the files of batch i+1 are decoded
   in the background while batch i is used (the exact path: one Loader per batch).
4. In-order access -- it[0], it[1], ... of an epoch, `next(it)` / `for x, y in it`, and
   model.fit(it, shuffle=False) -- is pipelined (file iterators with stoker's decoder): the first
   request of an epoch for batch 0 starts one persistent C++ Loader over the epoch's files in
   index_array order, `prefetch` batches ahead on stoker's threads, and each next batch comes
   from it (the batches in between of up to 8 requests running ahead are held; the last batch
   asked again is served again). Any other request (out of order, behind the pipeline) takes the
   exact path of 3; a new epoch (on_epoch_end, reset, next() wrapping) drops the pipeline, and a
   bad file ends it (the error is raised for its batch, as Keras' load_img would; the rest of the
   epoch takes the exact path). `it.pipelined = False` turns it off, "decode" keeps it to
   decoding; `it.pipelined_batches` counts the batches it served.
   - A deterministic generator (no random transform), a preprocessing_function, or per-pixel
     featurewise statistics: the Loader makes the exact path's uint8 pixels (full-size JPEG decode,
     Pillow-exact resize) and 2. runs on them as on the exact path: the same values as 3., Keras'
     pixels for a deterministic generator.
   - A random augmentation: decode, augmentation, rescale and standardisation are one pass inside
     the Loader (stoker's Augmenter as its transform, float32 out): the warp samples the decoded
     source directly (the output size folded into the affine transform, bilinear with
     interpolation_order=1; keep_aspect_ratio as a centre crop) where Keras first resizes with PIL
     (`interpolation`) and then warps at the target size. Both are legitimate and mean the same
     transforms (Keras' parameter ranges, fractions of the target size); the pixels differ, so a
     batch asked in order and again out of order has the same files, labels and transform
     ranges but not the same pixels. JPEGs are decoded DCT-scaled where that stays above the target
     (the decoder uses only TurboJPEG's fast 1/2, 1/4 and 1/8 scales). Draws are keyed by (seed,
     epoch, position in the epoch): reproducible for a given seed.
5. Keras' fit order -- model.fit(it) asks a Sequence's batches in a random order by default
   (fit's shuffle=True: tf_keras' KerasSequenceAdapter and OrderedEnqueuer, Keras 3's
   PyDatasetAdapter draw it with random.shuffle(list(range(len(it)))) from Python's global RNG
   just before the pass). The iterator keeps the state of that RNG seen at its previous call
   (construction, each request, on_epoch_end); when the state has moved, it replays the shuffle
   from the kept state, and if that ends in the current state it knows the order the coming
   requests follow. That pass is then pipelined too: the same Loader over the epoch's files as in
   4., started at each batch with resume() (two Loaders taking turns, each decoding only the batch
   it is given, one ahead), so batch k holds the same pixels, draws and labels as in order.
   Requests that leave the order take the exact path of 3. `it.pipelined_batches` counts these
   batches too.

Random transforms are drawn from stoker's Philox RNG keyed by (seed, epoch, sample index) (the
pipelined fused path: position in the epoch), not from NumPy's global RNG: the same
distributions as Keras (same parameter ranges), not the same draws. The same batch asked twice
within an epoch by the same path gets the same transforms; each epoch (each
on_epoch_end / index-array reset) draws new ones. With seed=None a seed is drawn from NumPy's
global RNG when the iterator is made.

Data that stoker's C++ augmenter cannot take (float arrays whose values are not integers in
0..255, or a channel count other than 1, 3, 4) follows Keras' per-image path in NumPy/SciPy
(parameters still drawn from stoker's RNG; Keras' brightness shift, Pillow's ImageEnhance, enhances
an image of another channel count one channel at a time, which is what it computes per channel).
So do settings its C++ path lacks, with one warning per generator: interpolation_order other
than 0/1 (Keras' scipy.ndimage warp of each image, the parameters stoker draws for the sample; file
iterators still pipeline the decode), and fit(augment=True) on data that is not 8-bit or has
another channel count (Keras' order: rescale, then the transform).
zca_whitening=True: fit computes Keras' matrix (NumPy's SVD of the centred, flattened images,
sqrt(n) / (s + zca_epsilon)), standardize applies it as Keras does, and batches apply it after
stoker's C++ standardisation as one float32 matrix product (file iterators pipeline the decode). apply_transform uses the binding's
Augmenter.apply_with when it accepts (H, W, C) images (the current binding rejects them), else the
same NumPy/SciPy path, which is Keras' math.

color_mode='grayscale' on 16- and 32-bit images (PIL modes 'I;16', 'I'): Pillow decodes them as
Keras' load_img does, keeping their values (float32, as img_to_array), and the batch follows Keras'
per-image math in NumPy/SciPy (apply_transform, standardize; parameters from stoker's RNG), with one
warning per generator. Other modes ('F' included) are converted to 8-bit 'L', as Keras does.

Not implemented (NotImplementedError naming the argument): decoder='stoker' with color_mode other
than 'rgb'. Unlike Keras, unknown keyword arguments of flow_from_dataframe raise TypeError instead
of being ignored.

Measured against tf_keras 2.x (python/tests/test_keras.py): file lists, classes, splits and
labels identical; decoder='pil' batches pixel-identical for every interpolation; standardised
values within 2e-5; the C++ batch augmentation against Keras' apply_transform with the same
parameters: 0 for flips, brightness, channel shift and order-0 warps, at most 1.33 grey levels for
bilinear warps.
"""


from ._common import (  # noqa: F401
    _BASES,
    _CHANNELS,
    _WHITE_LIST_FORMATS,
    KERAS_FLAVOURS,
    _as_u8,
    _cpu_count,
    _floatx,
    _image_data_format,
    _keras,
    _PILImage,
    _threads,
)
from ._decode import _PIL_FILTERS, _STOKER_FILTERS, _FileDecoder, _load_pil  # noqa: F401
from ._transform import _apply_transform_numpy, _apply_with_works, _array_to_pil, _plain_pil  # noqa: F401
from .dataset import image_dataset_from_directory
from .generator import ImageDataGenerator
from .iterators import DataFrameIterator, DirectoryIterator, Iterator, NumpyArrayIterator, _FileIterator, _walk_files  # noqa: F401
from .pipeline import _EpochPipeline  # noqa: F401

__all__ = ["ImageDataGenerator", "DirectoryIterator", "DataFrameIterator", "NumpyArrayIterator", "Iterator",
           "image_dataset_from_directory"]
