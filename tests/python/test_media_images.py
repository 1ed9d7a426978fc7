"""Image fields decoded by the loader (issue 38): pixels against Pillow's
decode of the same files, crop boxes against a reference computation of the
rule in docs/MEDIA.md, batches equal across thread counts and orders,
exact resume, and damaged images named."""
import io
import math
import os

import numpy as np
import pytest

import stoker

PIL = pytest.importorskip("PIL.Image")
Image = PIL

pytestmark = pytest.mark.skipif(
    not {"jpeg", "png", "webp"} <= set(stoker.media_formats()),
    reason="this build has no image decoders: " + ",".join(stoker.media_formats()))


def photo(rng, h, w):
    """Photograph-like pixels: smooth gradients, texture and noise."""
    y, x = np.mgrid[0:h, 0:w]
    a = rng.uniform(0, 6.28)
    base = np.stack([x * 255 / w, y * 255 / h, 128 + 100 * np.sin(x / 17 + a) * np.cos(y / 23)], -1)
    return np.clip(base + rng.normal(0, 18, (h, w, 3)), 0, 255).astype(np.uint8)


def encode(pixels, fmt, **kw):
    b = io.BytesIO()
    im = Image.fromarray(pixels)
    mode = kw.pop("mode", None)
    if mode:
        im = im.convert(mode)
    im.save(b, fmt, **kw)
    return b.getvalue()


def pil_rgb(data, draft=None):
    im = Image.open(io.BytesIO(data))
    if draft:
        im.draft("RGB", draft)
    return im.convert("RGB")


# Every kind of file the decoders take, with Pillow's pixels for it.
KINDS = {
    "jpeg": dict(fmt="JPEG", quality=90),
    "jpeg_q75_progressive": dict(fmt="JPEG", quality=75, progressive=True),
    "jpeg_gray": dict(fmt="JPEG", quality=85, mode="L"),
    "jpeg_cmyk": dict(fmt="JPEG", quality=85, mode="CMYK"),
    "jpeg_420": dict(fmt="JPEG", quality=95, subsampling=2),
    "png": dict(fmt="PNG"),
    "png_rgba": dict(fmt="PNG", mode="RGBA"),
    "png_palette": dict(fmt="PNG", mode="P"),
    "png_gray_alpha": dict(fmt="PNG", mode="LA"),
    "webp_lossy": dict(fmt="WEBP", quality=80),
    "webp_lossless": dict(fmt="WEBP", lossless=True),
}


@pytest.fixture(scope="module")
def files():
    rng = np.random.default_rng(38)
    out = {}
    for k, kw in KINDS.items():
        kw = dict(kw)
        fmt = kw.pop("fmt")
        out[k] = encode(photo(rng, 375, 500), fmt, **kw)
    return out


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_whole_image_equals_pillows_decode(files, kind):
    data = files[kind]
    ref = np.asarray(pil_rgb(data))
    info = stoker.media_probe(data)
    assert (info["media"], info["width"], info["height"]) == ("image", 500, 375)
    assert info["format"] == kind.split("_")[0]
    out = stoker.DecodeImage((375, 500), crop="none").decode(data)
    assert out.shape == (375, 500, 3) and out.dtype == np.uint8
    np.testing.assert_array_equal(out, ref)
    chw = stoker.DecodeImage((375, 500), crop="none", layout="CHW").decode(data)
    np.testing.assert_array_equal(chw, ref.transpose(2, 0, 1))


@pytest.mark.parametrize("div", [2, 4, 8])
def test_scaled_jpeg_decode_equals_pillows_draft(div):
    # An output of 1/div of the image: the DCT scale 1/div alone makes it,
    # as Pillow's draft mode does.
    rng = np.random.default_rng(div)
    data = encode(photo(rng, 376, 504), "JPEG", quality=88)
    ref = np.asarray(pil_rgb(data, draft=(504 // div, 376 // div)))
    assert ref.shape == (376 // div, 504 // div, 3)
    out = stoker.DecodeImage(ref.shape[:2], crop="none").decode(data)
    np.testing.assert_array_equal(out, ref)


# ---- the crop box rule (docs/MEDIA.md), computed here independently ----

def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


def key_of(seed, epoch, record):
    return splitmix64(splitmix64(splitmix64(seed) ^ epoch) ^ record)


def uniform(key, k):
    return (splitmix64((key + (k + 1) * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF) >> 11) \
        * 2.0 ** -53


def ref_box(W, H, key, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    area = W * H
    lr = (math.log(ratio[0]), math.log(ratio[1]))
    for t in range(10):
        target = area * (scale[0] + uniform(key, 4 * t) * (scale[1] - scale[0]))
        ar = math.exp(lr[0] + uniform(key, 4 * t + 1) * (lr[1] - lr[0]))
        w, h = round(math.sqrt(target * ar)), round(math.sqrt(target / ar))
        if 0 < w <= W and 0 < h <= H:
            y = int(uniform(key, 4 * t + 2) * (H - h + 1))
            x = int(uniform(key, 4 * t + 3) * (W - w + 1))
            return (x, y, w, h)
    r = W / H
    w, h = W, H
    if r < ratio[0]:
        h = round(W / ratio[0])
    elif r > ratio[1]:
        w = round(H * ratio[1])
    return ((W - w) // 2, (H - h) // 2, w, h)


def test_keys_and_boxes_follow_the_documented_rule():
    d = stoker.DecodeImage(224, flip=True)
    flips = 0
    for seed, epoch, rec, (W, H) in [(0, 0, 0, (500, 375)), (7, 3, 12345, (640, 480)),
                                     (1, 0, 9, (1000, 90)), (2, 5, 77, (90, 1000)),
                                     (3, 1, 2, (16, 16))] + \
            [(5, e, r, (500, 375)) for e in range(3) for r in range(60)]:
        key = key_of(seed, epoch, rec)
        assert stoker._media.decode_key(seed, epoch, rec) == key
        box, flipped = d.box(W, H, seed=seed, epoch=epoch, record=rec)
        assert box == ref_box(W, H, key), (seed, epoch, rec, W, H)
        assert flipped == (uniform(key, 40) < 0.5)
        flips += flipped
    assert 40 < flips < 140  # about half of 185
    # Other ranges, and the fallback for an extreme aspect ratio.
    d2 = stoker.DecodeImage(64, scale=(0.5, 0.6), ratio=(2.0, 3.0))
    for rec in range(50):
        key = key_of(0, 0, rec)
        assert d2.box(300, 200, record=rec)[0] == ref_box(300, 200, key, (0.5, 0.6), (2.0, 3.0))
    # center: the largest box of the output's ratio, times the fraction.
    c = stoker.DecodeImage((224, 224), crop="center")
    assert c.box(500, 375)[0] == ((500 - 328) // 2, (375 - 328) // 2, 328, 328)
    assert stoker.DecodeImage((100, 200), crop="center", center_fraction=1.0).box(500, 375)[0] \
        == (0, 62, 500, 250)
    assert stoker.DecodeImage(10, crop="none").box(500, 375)[0] == (0, 0, 500, 375)


@pytest.mark.parametrize("kind", ["png", "webp_lossless", "jpeg"])
def test_random_resized_crops_equal_pillows_resize_of_the_box(files, kind):
    # At full scale (a box no more than twice the output: the JPEG is
    # decoded at 8/8), the pixels are Pillow's BILINEAR resize of the same
    # box, to rounding.
    data = files[kind]
    full = pil_rgb(data)
    d = stoker.DecodeImage(224, scale=(0.3, 0.9), flip=True)
    checked = 0
    for rec in range(40):
        (x, y, w, h), flipped = d.box(500, 375, record=rec)
        if kind == "jpeg" and (w * 7 / 8 >= 224 and h * 7 / 8 >= 224):
            continue  # decoded at a smaller DCT scale: the next test
        out = d.decode(data, record=rec)
        ref = np.asarray(full.resize((224, 224), Image.BILINEAR, box=(x, y, x + w, y + h)))
        if flipped:
            ref = ref[:, ::-1]
        diff = np.abs(out.astype(int) - ref)
        assert diff.max() <= 1 and diff.mean() < 0.3, (rec, diff.max(), diff.mean())
        checked += 1
    assert checked >= 5


def test_a_jpeg_is_decoded_at_the_smallest_dct_scale_that_covers_the_output():
    # A box of 448 x 448 for 224 x 224: the 4/8 scale (Pillow's draft 1/2)
    # covers it exactly; the resize of that decode is what comes out.
    rng = np.random.default_rng(5)
    data = encode(photo(rng, 448, 448), "JPEG", quality=90)
    out = stoker.DecodeImage(224, crop="none").decode(data)
    ref = np.asarray(pil_rgb(data, draft=(224, 224)))
    assert ref.shape == (224, 224, 3)
    np.testing.assert_array_equal(out, ref)
    # Against the full decode resized, the scaled one is close but not equal
    # (the IDCT at 4/8 averages the pixel noise otherwise than a 4-tap
    # filter): the same picture, a few levels apart on average (a box off
    # by a pixel would be tens apart on this noisy image).
    full = np.asarray(pil_rgb(data).resize((224, 224), Image.BILINEAR))
    assert np.abs(out.astype(int) - full).mean() < 8


# ---- in the loader ----

@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    rng = np.random.default_rng(11)
    recs = []
    kinds = list(KINDS.values())
    for i in range(60):
        kw = dict(kinds[i % len(kinds)])
        fmt = kw.pop("fmt")
        h, w = int(rng.integers(60, 300)), int(rng.integers(60, 300))
        recs.append({"image": encode(photo(rng, h, w), fmt, **kw), "label": np.int64(i)})
    path = str(tmp_path_factory.mktemp("media") / "imgs.stk")
    assert stoker.write(path, recs, fields={"image": stoker.Image()}, shard_bytes=200_000) == 60
    return path, [r["image"] for r in recs]


def epoch_batches(path, spec, **kw):
    ld = stoker.Loader(path, 8, decode={"image": spec}, **kw)
    out = [(b["label"].copy(), b["image"].copy()) for b in ld]
    ld.close()
    return out


@pytest.mark.parametrize("shuffle", ["block", "random", "sequential"])
def test_batches_are_each_records_decode_with_any_thread_count(dataset, shuffle):
    path, images = dataset
    spec = stoker.DecodeImage((48, 64), flip=True, layout="CHW")
    one = epoch_batches(path, spec, threads=1, shuffle=shuffle, seed=9)
    three = epoch_batches(path, spec, threads=3, shuffle=shuffle, seed=9, backend="pool")
    assert len(one) == len(three) == 8
    seen = []
    for (la, ia), (lb, ib) in zip(one, three):
        np.testing.assert_array_equal(la, lb)
        np.testing.assert_array_equal(ia, ib)
        assert ia.shape == (len(la), 3, 48, 64) and ia.dtype == np.uint8
        for rec, img in zip(la, ia):
            np.testing.assert_array_equal(img, spec.decode(images[rec], seed=9, record=rec))
            seen.append(int(rec))
    assert sorted(seen) == list(range(60))


def test_epochs_and_seeds_give_other_crops(dataset):
    path, images = dataset
    spec = stoker.DecodeImage(32)
    ld = stoker.Loader(path, 60, decode={"image": spec}, shuffle="sequential", seed=1)
    e0 = [b["image"].copy() for b in ld][0]
    e1 = [b["image"].copy() for b in ld][0]  # the next epoch
    ld.close()
    assert not np.array_equal(e0, e1)
    np.testing.assert_array_equal(e1[7], spec.decode(images[7], seed=1, epoch=1, record=7))


def test_resume_gives_the_same_pixels(dataset):
    path, _ = dataset
    spec = stoker.DecodeImage(40, flip=True)
    whole = epoch_batches(path, spec, shuffle="random", seed=4, epoch=2)
    ld = stoker.Loader(path, 8, decode={"image": spec}, shuffle="random", seed=4, epoch=2)
    it = iter(ld)
    for _ in range(3):
        next(it)
    state = ld.state_dict()
    ld.close()
    ld = stoker.Loader(path, 8, decode={"image": spec}, shuffle="random", seed=4, epoch=2,
                       threads=2)
    ld.load_state_dict(state)
    rest = [(b["label"].copy(), b["image"].copy()) for b in ld]
    ld.close()
    assert len(rest) == len(whole) - 3
    for (la, ia), (lb, ib) in zip(whole[3:], rest):
        np.testing.assert_array_equal(la, lb)
        np.testing.assert_array_equal(ia, ib)


def test_without_decode_the_field_is_the_files_bytes(dataset):
    path, images = dataset
    ld = stoker.Loader(path, 60, shuffle="sequential")
    b = next(iter(ld))
    offs = b["image_offsets"]
    assert bytes(b["image"][offs[5]:offs[6]]) == images[5]
    ld.close()


def test_decode_options_are_checked(dataset):
    path, _ = dataset
    with pytest.raises(stoker.InvalidArgument, match="'label' is i64.*not image"):
        stoker.Loader(path, 4, decode={"label": stoker.DecodeImage(8)})
    with pytest.raises(stoker.InvalidArgument, match="'nope' is not a selected field"):
        stoker.Loader(path, 4, decode={"nope": stoker.DecodeImage(8)})
    with pytest.raises(stoker.InvalidArgument, match="not audio"):
        stoker.Loader(path, 4, decode={"image": stoker.DecodeAudio(100)})
    with pytest.raises(stoker.InvalidArgument, match="scale"):
        stoker.DecodeImage(8, scale=(0.9, 0.1))
    with pytest.raises(stoker.InvalidArgument, match="crop must be one of"):
        stoker.DecodeImage(8, crop="middle")
    with pytest.raises(stoker.InvalidArgument, match="image size of 0x8"):
        stoker.DecodeImage((8, 0))
    with pytest.raises(TypeError, match="DecodeImage or DecodeAudio"):
        stoker.Loader(path, 4, decode={"image": 224})


# ---- damaged images ----

def damaged(files):
    j, p = files["jpeg"], files["png"]
    crc = bytearray(p)
    crc[40] ^= 0xFF  # inside IHDR/IDAT: a chunk whose CRC no longer matches
    return {
        "truncated_jpeg": (j[: len(j) // 2], "JPEG"),
        "jpeg_header_only": (j[:200], "JPEG"),
        "jpeg_garbage_body": (j[:700] + bytes(np.random.default_rng(1).integers(0, 256, 3000, np.uint8)), "JPEG"),
        "png_bad_crc": (bytes(crc), "PNG"),
        "truncated_png": (p[: len(p) // 3], "PNG"),
        "truncated_webp": (files["webp_lossy"][: len(files["webp_lossy"]) // 2], "WebP"),
        "not_an_image": (b"hello, this is text" * 10, "not an image"),
        "audio_in_image_field": (b"fLaC" + bytes(100), "flac data in an image field"),
        "empty": (b"", "an empty record"),
    }


def test_damaged_images_raise_media_error_saying_what(files):
    spec = stoker.DecodeImage(32)
    for name, (data, what) in damaged(files).items():
        with pytest.raises(stoker.MediaError, match=what):
            spec.decode(data)


def test_a_damaged_record_in_a_dataset_names_file_record_and_field(files, tmp_path):
    good = files["jpeg"]
    bad = good[: len(good) // 2]
    path = str(tmp_path / "bad.stk")
    # (written as plain bytes: write() refuses a file whose header is bad,
    # but a truncated body only shows when decoded.)
    recs = [{"image": good if i != 13 else bad, "label": np.int64(i)} for i in range(20)]
    stoker.write(path, recs, fields={"image": stoker.Image()})
    ld = stoker.Loader(path, 4, decode={"image": stoker.DecodeImage(16)}, shuffle="sequential")
    with pytest.raises(stoker.MediaError) as e:
        for _ in ld:
            pass
    msg = str(e.value)
    assert "record 13" in msg and "field 'image'" in msg and ".stk" in msg and "JPEG" in msg, msg
    ld.close()


def test_write_refuses_what_is_not_an_image_naming_the_record(files, tmp_path):
    recs = [{"image": files["png"]}, {"image": files["jpeg"]}, {"image": b"GIF89a" + bytes(40)}]
    with pytest.raises(stoker.MediaError, match="record 2: field 'image'"):
        stoker.write(str(tmp_path / "w.stk"), recs, fields={"image": stoker.Image()})
    with pytest.raises(stoker.InvalidArgument, match="record 0: field 'clip' is a audio field"):
        stoker.write(str(tmp_path / "w2.stk"), [{"clip": files["png"]}],
                     fields={"clip": stoker.Audio()})
    with pytest.raises(TypeError, match="file's bytes"):
        stoker.write(str(tmp_path / "w3.stk"), [{"image": np.zeros(3, np.float32)}],
                     fields={"image": stoker.Image()})
    assert not os.path.exists(str(tmp_path / "w.stk" / "manifest.json"))


# ---- a folder of images: packed, or indexed in place ----

@pytest.fixture(scope="module")
def folder(tmp_path_factory, files):
    root = tmp_path_factory.mktemp("folder") / "train"
    names = {"cat": ["jpeg", "png", "webp_lossy"], "dog": ["jpeg_gray", "jpeg_cmyk"],
             "zebra": ["png_rgba", "jpeg_q75_progressive"]}
    ext = {"jpeg": ".jpg", "png": ".png", "webp": ".webp"}
    made = {}
    for c, kinds in names.items():
        (root / c).mkdir(parents=True)
        for i, k in enumerate(kinds):
            p = root / c / f"{i}{ext[k.split('_')[0]]}"
            p.write_bytes(files[k])
            made[f"{c}/{p.name}"] = (c, files[k])
    (root / "README.txt").write_text("not an image: skipped")
    return root, made


def run_cli(*args):
    import subprocess
    import sys
    from conftest import stoker_exe
    env = dict(os.environ, STOKER_PYTHON=sys.executable)
    return subprocess.run([str(stoker_exe()), *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_pack_from_images_labels_by_sub_folder_as_imagefolder(folder, tmp_path):
    root, made = folder
    out = str(tmp_path / "train.stk")
    r = run_cli("pack", "--from", "images", str(root), "-o", out)
    assert r.returncode == 0, r.stderr
    assert "packed 7 image files" in r.stdout and "3 classes" in r.stdout
    ds_classes = ["cat", "dog", "zebra"]
    spec = stoker.DecodeImage((375, 500), crop="none")
    ld = stoker.Loader(out, 7, decode={"image": spec}, shuffle="sequential")
    b = next(iter(ld))
    paths = list(b["path"])
    assert paths == sorted(made, key=os.fsencode)
    for path, label, img in zip(paths, b["label"], b["image"]):
        c, data = made[path]
        assert ds_classes[label] == c
        np.testing.assert_array_equal(img, np.asarray(pil_rgb(data)))
    ld.close()
    # A table of labels instead (names numbered in sorted order).
    table = tmp_path / "labels.csv"
    table.write_text("file,label\n" + "".join(f"{p},{'odd' if i % 2 else 'even'}\n"
                                              for i, p in enumerate(sorted(made))))
    r = run_cli("pack", "--from", "images", str(root), "-o", out, "--force", "--labels",
                str(table))
    assert r.returncode == 0, r.stderr
    ld = stoker.Loader(out, 7, shuffle="sequential")
    b = next(iter(ld))
    assert list(b["label"]) == [0 if i % 2 == 0 else 1 for i in range(7)]  # even, odd
    ld.close()


def test_pack_from_images_names_a_file_that_is_not_an_image(folder, tmp_path):
    root, _ = folder
    bad = root / "dog" / "broken.jpg"
    bad.write_bytes(b"<html>not found</html>")
    try:
        r = run_cli("pack", "--from", "images", str(root), "-o", str(tmp_path / "x.stk"))
    finally:
        bad.unlink()
    assert r.returncode == 2
    assert "broken.jpg" in r.stderr and "not a format stoker decodes" in r.stderr, r.stderr


def test_an_image_folder_indexed_in_place(folder, tmp_path):
    root, made = folder
    idx = str(root.parent / "train.idx")  # (beside the folder: files under its directory)
    assert stoker.index(str(root), idx) == 7
    spec = stoker.DecodeImage(40, flip=True)
    ld = stoker.Loader(idx, 7, decode={"image": spec}, shuffle="sequential", seed=2)
    b = next(iter(ld))
    for rec, (path, img) in enumerate(zip(sorted(made, key=os.fsencode), b["image"])):
        np.testing.assert_array_equal(img, spec.decode(made[path][1], seed=2, record=rec))
    ld.close()
    (root / "cat" / "9.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(30))
    try:
        with pytest.raises(stoker.MediaError, match="9.png: PNG"):
            stoker.index(str(root), idx)
    finally:
        (root / "cat" / "9.png").unlink()


@pytest.mark.parametrize("shuffle", ["block", "random", "sequential"])
def test_on_error_skip_replaces_a_sample_whose_image_does_not_decode(files, tmp_path, shuffle):
    rng = np.random.default_rng(3)
    images = [encode(photo(rng, 40, 50), "JPEG", quality=85) for _ in range(30)]
    bad = {7, 8, 21}  # two in a row: the replacement of 7 is damaged too
    recs = [{"image": images[i][: len(images[i]) // 2] if i in bad else images[i],
             "label": np.int64(i)} for i in range(30)]
    path = str(tmp_path / "skip.stk")
    stoker.write(path, recs, fields={"image": stoker.Image()})
    spec = stoker.DecodeImage(24, flip=True)
    runs = []
    for threads in (1, 2):
        ld = stoker.Loader(path, 5, decode={"image": spec}, on_error="skip", shuffle=shuffle,
                           seed=1, threads=threads, block_samples=10)
        got = [(b["label"].copy(), b["image"].copy()) for b in ld]
        skipped = ld.stats()["skipped"]
        ld.close()
        labels = np.concatenate([la for la, _ in got])
        assert len(labels) == 30 and not (set(labels.tolist()) & bad)
        for la, ia in got:  # every image is its own label's record, decoded
            for rec, img in zip(la, ia):
                np.testing.assert_array_equal(img, spec.decode(images[rec], seed=1, record=rec))
        assert skipped == 3
        runs.append(labels)
    np.testing.assert_array_equal(runs[0], runs[1])
    with pytest.raises(stoker.MediaError, match="record 7 field 'image'"):
        for _ in stoker.Loader(path, 5, decode={"image": spec}, shuffle="sequential"):
            pass


def test_stoker_read_decodes_with_image_and_names_bad_options(dataset):
    path, _ = dataset
    r = run_cli("read", path, "--batch", "16", "--image", "image=32x48,flip,chw,crop=center",
                "--json")
    assert r.returncode == 0, r.stderr
    import json
    out = json.loads(r.stdout)
    assert out["samples"] == 60
    # 60 samples of 3 x 32 x 48 bytes, and the labels' 8 bytes each.
    assert out["bytes"] == 60 * (3 * 32 * 48 + 8)
    r = run_cli("read", path, "--image", "image=32,sharpen")
    assert r.returncode != 0 and "unknown option 'sharpen'" in r.stderr
    r = run_cli("read", path, "--image", "label=32")
    assert r.returncode != 0 and "field 'label' is i64, not image" in r.stderr


def test_stats_count_the_decode(dataset):
    path, images = dataset
    ld = stoker.Loader(path, 10, decode={"image": stoker.DecodeImage(16)}, threads=2)
    n = sum(len(b["label"]) for b in ld)
    st = ld.stats()
    ld.close()
    assert st["decode"]["count"] == n == 60
    assert st["decode"]["bytes"] == sum(len(x) for x in images)
    assert 0 < st["decode"]["seconds"] <= st["assemble"]["seconds"]
    ld = stoker.Loader(path, 10)  # no decode: nothing counted
    for _ in ld:
        pass
    assert ld.stats()["decode"]["count"] == 0
    ld.close()


def test_mixtures_decode_each_sources_media(tmp_path):
    rng = np.random.default_rng(8)
    data = {}
    for name, n in (("a", 12), ("b", 18)):
        data[name] = [encode(photo(rng, 40 + i, 50), "JPEG", quality=85) for i in range(n)]
        stoker.write(str(tmp_path / f"{name}.stk"),
                     [{"image": x, "label": np.int64(i)} for i, x in enumerate(data[name])],
                     fields={"image": stoker.Image()})
    center = stoker.DecodeImage(16, crop="center")
    srcs = [stoker.Source(str(tmp_path / f"{n}.stk"), decode={"image": center}) for n in "ab"]
    n = 0
    for b in stoker.Loader(srcs, batch_size=8, seed=1):
        for s, label, img in zip(b["source"], b["label"], b["image"]):
            np.testing.assert_array_equal(img, center.decode(data["ab"[s]][label]))
            n += 1
    assert n == 24  # 12 of each at weights 1:1
    rr = stoker.DecodeImage(16, flip=True)
    runs = []
    for threads in (1, 2):
        srcs = [stoker.Source(str(tmp_path / f"{n}.stk"), decode={"image": rr}) for n in "ab"]
        runs.append([(b["source"].copy(), b["label"].copy(), b["image"].copy())
                     for b in stoker.Loader(srcs, batch_size=8, seed=1, threads=threads)])
    for x, y in zip(*runs):
        for u, v in zip(x, y):
            np.testing.assert_array_equal(u, v)
    with pytest.raises(stoker.InvalidArgument, match="differs from source 0's"):
        stoker.Loader([stoker.Source(str(tmp_path / "a.stk"), decode={"image": rr}),
                       stoker.Source(str(tmp_path / "b.stk"), decode={"image": center.__class__(8)})],
                      batch_size=4)


@pytest.mark.parametrize("backend", ["pool", "mmap"])
def test_one_large_image_does_not_size_every_batchs_staging(tmp_path, backend):
    # A 3 MB image among 6 KB ones: staging sized for batches of the largest
    # would take 64 x 3 MB, beyond the budget; the batch that holds it grows
    # its worker's area instead.
    rng = np.random.default_rng(2)
    big = encode(rng.integers(0, 255, (1000, 1000, 3), np.uint8), "PNG")
    assert len(big) > 2_900_000
    small = [encode(photo(rng, 60, 80), "JPEG", quality=90) for _ in range(100)]
    recs = [{"image": big if i == 37 else small[i], "label": np.int64(i)} for i in range(100)]
    path = str(tmp_path / "bigsmall.stk")
    stoker.write(path, recs, fields={"image": stoker.Image()})
    spec = stoker.DecodeImage(24, crop="center")
    ld = stoker.Loader(path, 64, decode={"image": spec}, backend=backend, shuffle="random",
                       memory_budget=32 << 20)
    seen = 0
    for b in ld:
        for label, img in zip(b["label"], b["image"]):
            np.testing.assert_array_equal(img, spec.decode(recs[label]["image"]))
            seen += 1
    ld.close()
    assert seen == 100


def test_block_order_groups_are_sized_by_their_largest_blocks(tmp_path):
    # One 3 MB image among 6 KB ones in 64 KB blocks, 16 blocks a group: a
    # group needs the 16 largest blocks (about 4 MB), not 16 x 3 MB.
    rng = np.random.default_rng(4)
    big = encode(rng.integers(0, 255, (1000, 1000, 3), np.uint8), "PNG")
    small = [encode(photo(rng, 60, 80), "JPEG", quality=90) for _ in range(300)]
    recs = [{"image": big if i == 100 else small[i], "label": np.int64(i)} for i in range(300)]
    path = str(tmp_path / "blocks.stk")
    stoker.write(path, recs, fields={"image": stoker.Image()})
    spec = stoker.DecodeImage(24, crop="center")
    ld = stoker.Loader(path, 16, decode={"image": spec}, backend="pool", shuffle="block",
                       block_bytes=64 << 10, block_group=16, memory_budget=40 << 20)
    labels = []
    for b in ld:
        for label, img in zip(b["label"], b["image"]):
            np.testing.assert_array_equal(img, spec.decode(recs[label]["image"]))
            labels.append(int(label))
    ld.close()
    assert sorted(labels) == list(range(300))


def test_decoding_loaders_take_every_cpu_and_up_to_64_threads(dataset):
    path, _ = dataset
    spec = stoker.DecodeImage(8)
    ld = stoker.Loader(path, 4, decode={"image": spec})
    assert ld.stats()["threads"] == min(os.cpu_count(), 64)
    ld.close()
    ld = stoker.Loader(path, 4, decode={"image": spec}, threads=12)
    assert ld.stats()["threads"] == 12
    assert sum(len(b["label"]) for b in ld) == 60
    ld.close()
    with pytest.raises(stoker.InvalidArgument, match="threads: 65"):
        stoker.Loader(path, 4, decode={"image": spec}, threads=65)


def test_a_hugging_face_dataset_with_an_image_column(files, tmp_path):
    # HF's Image feature stores each file's bytes (and path) in a struct: a
    # user's dataset, shuffled, written as is; its images become an image
    # field, stored undecoded, and decode to what HF's own decode gives.
    datasets = pytest.importorskip("datasets")
    kinds = ["jpeg", "png", "webp_lossless", "jpeg_gray", "png_rgba"]
    ds = datasets.Dataset.from_dict({
        "image": [{"bytes": files[k], "path": None} for k in kinds],
        "label": list(range(len(kinds))), "caption": [f"a {k}" for k in kinds],
    }).cast_column("image", datasets.Image()).shuffle(seed=3)
    path = str(tmp_path / "hf.stk")
    assert stoker.write(path, ds) == len(kinds)
    spec = stoker.DecodeImage((375, 500), crop="none")
    b = next(iter(stoker.Loader(path, len(kinds), shuffle="sequential", decode={"image": spec})))
    for label, caption, img, row in zip(b["label"], b["caption"], b["image"], ds):
        assert label == row["label"] and caption == row["caption"]
        np.testing.assert_array_equal(img, np.asarray(row["image"].convert("RGB")))
