#!/usr/bin/env python3
"""Fixtures for the image input of the model kit: read_image against PIL (load_image's view of a file) and
resize_like_pil / resize_like_vae_image_processor against Pillow's Image.resize and diffusers' VideoProcessor.

Usage: image_input_fixtures.py OUT_DIR

The reference is Pillow (PIL.Image.open, ImageOps.exif_transpose, convert, resize) and diffusers 0.42.1
VaeImageProcessor.preprocess (diffusers/image_processor.py), as diffusers' load_image (utils/loading_utils.py) and
LTX2ImageToVideoPipeline (VideoProcessor(vae_scale_factor=32, resample="bilinear")) use them. Every image is made here
from a seeded numpy generator: random noise (the hardest case for rounding) and a photo-like one (smooth gradients,
a disc, mild noise).

Files written:
  decode/<name>.<ext>        images written by PIL: PNG 8/16-bit gray, gray+alpha, RGB, RGBA, palette (with and
                             without tRNS), 1-bit; JPEG RGB (quality 95, 4:2:0 and 4:4:4) and gray; WebP lossless RGB
                             and RGBA, lossy RGB; JPEGs with EXIF orientation 2..8
  decode/<name>.rgb          PIL's pixels for it: np.array(exif_transpose(open(f)).convert("RGB" or "RGBA")), uint8
                             [h, w, c]; 16-bit gray: the most significant byte (ddo's choice; PIL's convert clips)
  resize/<name>.in / .out    raw uint8 [h, w, c] input and Image.resize((w, h), filter) output
  vae/<name>.in / .out       raw uint8 input and VideoProcessor(...).preprocess(image, height, width) as float32
                             [1, 3, h, w]
  reference.json             versions, and per case its sizes, channels, filter and (decode) whether the pixels must
                             be equal (exact) or within a stated tolerance (JPEG and lossy WebP: libjpeg-turbo and
                             libwebp upsample chroma differently from libswscale); written last
"""

import io
import json
import sys
from pathlib import Path

import numpy as np
import PIL
from PIL import Image, ImageOps

import diffusers
from diffusers.video_processor import VideoProcessor

SEED = 0


def photo(rng, h, w, c):
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    base = np.stack([
        255 * x / max(w - 1, 1),
        255 * y / max(h - 1, 1),
        127 + 100 * np.sin(x / 5.0) * np.cos(y / 7.0),
    ], -1)
    disc = (x - w * 0.6) ** 2 + (y - h * 0.4) ** 2 < (min(h, w) * 0.25) ** 2
    base[disc] = [230, 40, 60]
    base += rng.normal(0, 6, base.shape)
    img = np.clip(np.rint(base), 0, 255).astype(np.uint8)
    if c == 4:
        alpha = np.clip(np.rint(255 * (0.5 + 0.5 * np.sin(x / 9.0 + y / 13.0))), 0, 255).astype(np.uint8)
        alpha[:, :2] = 0
        alpha[:2, :] = 255
        img = np.concatenate([img, alpha[..., None]], -1)
    return img


def noise(rng, h, w, c):
    return rng.integers(0, 256, (h, w, c), dtype=np.uint8)


def main():
    out = Path(sys.argv[1])
    rng = np.random.default_rng(SEED)
    ref = {"pillow": PIL.__version__, "diffusers": diffusers.__version__, "numpy": np.__version__, "seed": SEED,
           "decode": [], "resize": [], "vae": []}

    # --- decode ---
    d = out / "decode"
    d.mkdir(parents=True, exist_ok=True)

    def add(name, im, fmt, ext, equal, tol=0, **save):
        path = d / f"{name}.{ext}"
        im.save(path, fmt, **save)
        got = Image.open(path)
        bit_depth = 8
        if got.mode in ("I;16", "I;16B", "I"):  # 16-bit gray: the most significant byte (PIL's convert clips)
            a = np.array(got).astype(np.uint16)
            a = (a >> 8).astype(np.uint8)
            pix = np.repeat(a[..., None], 3, -1)
            bit_depth = 16
        else:
            t = ImageOps.exif_transpose(got)
            alpha = t.mode in ("RGBA", "LA", "PA") or (t.mode == "P" and "transparency" in t.info)
            pix = np.array(t.convert("RGBA" if alpha else "RGB"))
        (d / f"{name}.rgb").write_bytes(np.ascontiguousarray(pix).tobytes())
        ref["decode"].append({"name": name, "file": path.name, "format": {"PNG": "png", "JPEG": "jpeg", "WEBP": "webp"}[fmt],
                              "width": int(pix.shape[1]), "height": int(pix.shape[0]), "channels": int(pix.shape[2]),
                              "exact": equal, "max_abs_tolerance": tol, "bit_depth": bit_depth})
        return ref["decode"][-1]

    rgb = photo(rng, 37, 53, 3)
    rgba = photo(rng, 37, 53, 4)
    add("png_rgb8", Image.fromarray(rgb, "RGB"), "PNG", "png", True)
    add("png_rgba8", Image.fromarray(rgba, "RGBA"), "PNG", "png", True)
    add("png_gray8", Image.fromarray(rgb[..., 0], "L"), "PNG", "png", True)
    add("png_la8", Image.fromarray(rgba[..., [0, 3]], "LA"), "PNG", "png", True)
    add("png_gray1", Image.fromarray(rgb[..., 0] > 128).convert("1"), "PNG", "png", True)
    pal = Image.fromarray(rgb, "RGB").quantize(colors=37, method=Image.Quantize.MEDIANCUT)
    add("png_palette", pal, "PNG", "png", True)
    pal_t = pal.copy()
    pal_t.info["transparency"] = 3
    add("png_palette_trns", pal_t, "PNG", "png", True, transparency=3)
    # 16-bit: written from raw big-endian samples (PIL saves I;16 gray; RGB48 via a raw PNG encoder below)
    g16 = (rng.integers(0, 65536, (29, 41), dtype=np.uint16))
    add("png_gray16", Image.fromarray(g16), "PNG", "png", True)
    ref["decode"][-1]["bit_depth"] = 16
    for name, arr, ctype in [("png_rgb16", rng.integers(0, 65536, (23, 31, 3), dtype=np.uint16), 2),
                             ("png_rgba16", rng.integers(0, 65536, (23, 31, 4), dtype=np.uint16), 6),
                             ("png_la16", rng.integers(0, 65536, (23, 31, 2), dtype=np.uint16), 4)]:
        path = d / f"{name}.png"
        path.write_bytes(raw_png16(arr, ctype))
        got = Image.open(path)
        mode = {2: "RGB", 6: "RGBA", 4: "RGBA"}[ctype]
        pix = np.array(got.convert(mode))
        msb = (arr >> 8).astype(np.uint8)
        expect = msb if ctype != 4 else np.concatenate([np.repeat(msb[..., :1], 3, -1), msb[..., 1:]], -1)
        assert np.array_equal(pix, expect), f"{name}: PIL does not keep the most significant byte"
        (d / f"{name}.rgb").write_bytes(np.ascontiguousarray(pix).tobytes())
        ref["decode"].append({"name": name, "file": path.name, "format": "png", "width": int(pix.shape[1]),
                              "height": int(pix.shape[0]), "channels": int(pix.shape[2]), "exact": True,
                              "max_abs_tolerance": 0, "bit_depth": 16})
    big = photo(rng, 64, 96, 3)
    add("jpeg_420", Image.fromarray(big, "RGB"), "JPEG", "jpg", False, 20, quality=95, subsampling=2)
    add("jpeg_444", Image.fromarray(big, "RGB"), "JPEG", "jpg", False, 2, quality=95, subsampling=0)
    add("jpeg_gray", Image.fromarray(big[..., 1], "L"), "JPEG", "jpg", False, 1, quality=90)
    add("webp_lossless", Image.fromarray(big, "RGB"), "WEBP", "webp", True, lossless=True)
    add("webp_lossless_rgba", Image.fromarray(photo(rng, 40, 60, 4), "RGBA"), "WEBP", "webp", True, lossless=True, exact=True)
    add("webp_lossy", Image.fromarray(big, "RGB"), "WEBP", "webp", False, 20, quality=90)
    # EXIF orientation: a non-square image so that a swapped width/height shows
    for o in range(2, 9):
        exif = Image.Exif()
        exif[0x0112] = o
        e = add(f"jpeg_orientation{o}", Image.fromarray(big, "RGB"), "JPEG", "jpg", False, 20, quality=95,
                subsampling=2, exif=exif.tobytes())
        e["orientation"] = o
    exif = Image.Exif()
    exif[0x0112] = 6
    e = add("png_orientation6", Image.fromarray(rgb, "RGB"), "PNG", "png", True, exif=exif.tobytes())
    e["orientation"] = 6

    # --- resize: Image.resize((w, h), filter) ---
    r = out / "resize"
    r.mkdir(parents=True, exist_ok=True)
    filters = {"nearest": Image.Resampling.NEAREST, "box": Image.Resampling.BOX, "bilinear": Image.Resampling.BILINEAR,
               "hamming": Image.Resampling.HAMMING, "bicubic": Image.Resampling.BICUBIC,
               "lanczos": Image.Resampling.LANCZOS}
    sources = {
        "noise_rgb": noise(rng, 45, 67, 3),
        "photo_rgb": photo(rng, 90, 121, 3),
        "noise_rgba": noise(rng, 33, 50, 4),
        "photo_rgba": photo(rng, 61, 47, 4),
        "noise_gray": noise(rng, 30, 41, 1),
    }
    sizes = [(0.5, 0.5), (1.7, 1.3), (0.37, 0.81), (3.0, 2.0), (0.13, 0.2), (1.0, 0.5), (0.66, 1.0)]
    for sname, arr in sources.items():
        (r / f"{sname}.in").write_bytes(arr.tobytes())
        h, w, c = arr.shape
        mode = {1: "L", 3: "RGB", 4: "RGBA"}[c]
        im = Image.fromarray(arr[..., 0] if c == 1 else arr, mode)
        for fname, f in filters.items():
            for sx, sy in sizes:
                ow, oh = max(1, round(w * sx)), max(1, round(h * sy))
                res = np.array(im.resize((ow, oh), f)).reshape(oh, ow, c)
                name = f"{sname}_{fname}_{ow}x{oh}"
                (r / f"{name}.out").write_bytes(res.tobytes())
                ref["resize"].append({"name": name, "input": f"{sname}.in", "width": w, "height": h, "channels": c,
                                      "out_width": ow, "out_height": oh, "filter": fname})

    # --- diffusers' VideoProcessor.preprocess (LTX-2 image-to-video: vae_scale_factor 32, bilinear) ---
    v = out / "vae"
    v.mkdir(parents=True, exist_ok=True)
    for name, arr, height, width, scale, resample in [
        ("ltx_down", photo(rng, 300, 410, 3), 192, 256, 32, "bilinear"),
        ("ltx_up_odd", photo(rng, 70, 90, 3), 250, 300, 32, "bilinear"),
        ("qwen_lanczos", photo(rng, 200, 150, 3), 128, 100, 16, "lanczos"),
        ("bicubic", noise(rng, 50, 60, 3), 64, 80, 8, "bicubic"),
    ]:
        (v / f"{name}.in").write_bytes(arr.tobytes())
        vp = VideoProcessor(vae_scale_factor=scale, resample=resample)
        t = vp.preprocess(Image.fromarray(arr, "RGB"), height=height, width=width)
        t = t.float().contiguous().numpy()
        (v / f"{name}.out").write_bytes(t.tobytes())
        ref["vae"].append({"name": name, "width": arr.shape[1], "height": arr.shape[0], "request_height": height,
                           "request_width": width, "vae_scale_factor": scale, "resample": resample,
                           "out_shape": list(t.shape)})

    (out / "reference.json").write_text(json.dumps(ref, indent=2))


def raw_png16(arr, ctype):
    """A 16-bit PNG written directly (PIL writes 16-bit gray only): filter 0 rows, zlib, CRCs."""
    import struct
    import zlib

    h, w = arr.shape[:2]
    raw = b"".join(b"\x00" + arr[y].astype(">u2").tobytes() for y in range(h))

    def chunk(t, data):
        return struct.pack(">I", len(data)) + t + data + struct.pack(">I", zlib.crc32(t + data) & 0xffffffff)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, ctype, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


if __name__ == "__main__":
    main()
