#!/usr/bin/python3
"""make_png_ref.py — the PNG files of every colour type and bit depth that tests/test_data.c decodes
(test_png_like_pil), written byte by byte here so each kind is there exactly (16-bit samples, alpha with
colour under transparent pixels, palettes with tRNS, 1/2/4-bit grey, Adam7, a gAMA chunk), and beside each
what Pillow makes of it: NAME.L = .convert("L"), NAME.RGB = .convert("RGB") (h*w and h*w*3 bytes, row-major).
One exception, said in the test: Pillow opens a 16-bit grey PNG as mode "I" and its convert("L") clips every
value above 255 to 255 (0x1234 -> 255); lamina takes the high byte there as it does for 16-bit colour (0x1234
-> 18, which Pillow gives for 16-bit RGB and grey+alpha, and OpenCV for all), so NAME.L/.RGB of those hold
the high bytes. Run it again (Debian's /usr/bin/python3 with python3-pil) to remake the files."""
import io
import os
import struct
import zlib

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))


def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)


def png(w, h, depth, ctype, rows, extra=b"", interlace=0):
    """rows: the filtered scanlines' payload (filter byte 0 added here), or for Adam7 the whole raw stream."""
    raw = rows if interlace else b"".join(b"\0" + r for r in rows)
    head = struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, interlace)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", head) + extra + chunk(b"IDAT", zlib.compress(raw)) +
            chunk(b"IEND", b""))


def be16(vals):
    return b"".join(struct.pack(">H", v) for v in vals)


def pack_bits(vals, depth):
    out, acc, n = bytearray(), 0, 0
    for v in vals:
        acc = (acc << depth) | v
        n += depth
        if n == 8:
            out.append(acc)
            acc, n = 0, 0
    if n:
        out.append(acc << (8 - n))
    return bytes(out)


W, H = 5, 3
rng = np.random.default_rng(30)
v16 = [0x1234, 0xabcd, 0xff01, 0x00ff, 0x8000] # the first is the issue's: 18 by its high byte
cases = {}
cases["grey16"] = png(W, H, 16, 0, [be16(np.roll(v16, y)) for y in range(H)])
cases["grey16_gama"] = png(W, H, 16, 0, [be16(np.roll(v16, y)) for y in range(H)],
                           extra=chunk(b"gAMA", struct.pack(">I", 45455)))
cases["rgb16"] = png(W, H, 16, 2, [be16([v16[(x + y + q) % 5] for x in range(W) for q in range(3)]) for y in range(H)])
cases["rgb16_gama"] = png(W, H, 16, 2, [be16([v16[(x + 2 * y + q) % 5] for x in range(W) for q in range(3)])
                                        for y in range(H)], extra=chunk(b"gAMA", struct.pack(">I", 100000)))
# alpha: transparent (0), half and opaque pixels, each with its own colour
cases["greyalpha16"] = png(W, H, 16, 4, [be16([v for x in range(W) for v in (v16[(x + y) % 5], (0, 0x8000, 0xffff)[x % 3])])
                                         for y in range(H)])
cases["rgba16"] = png(W, H, 16, 6, [be16([v for x in range(W) for v in
                                          [v16[(x + q + y) % 5] for q in range(3)] + [(0, 0x8000, 0xffff)[x % 3]]])
                                    for y in range(H)])
cases["greyalpha8"] = png(W, H, 8, 4, [bytes([v for x in range(W) for v in (40 * x + 10 * y + 7, (0, 128, 255)[x % 3])])
                                       for y in range(H)])
cases["rgba8"] = png(W, H, 8, 6, [bytes(rng.integers(0, 256, W * 4).astype(np.uint8) & 0xfe) for y in range(H)])
cases["rgba8_clear"] = png(W, H, 8, 6, [bytes([200, 100, 50, 0] * W) for y in range(H)]) # all transparent, not black
cases["rgb8_gama"] = png(W, H, 8, 2, [bytes(rng.integers(0, 256, W * 3).astype(np.uint8)) for y in range(H)],
                         extra=chunk(b"gAMA", struct.pack(">I", 45455)))
# palettes: 8-bit with tRNS (some entries transparent), 4-bit, and 2-bit without tRNS
pal = bytes(rng.integers(0, 256, 16 * 3).astype(np.uint8))
trns = bytes([0, 128, 255, 0] + [255] * 4)
cases["palette8_trns"] = png(W, H, 8, 3, [bytes([(x + 3 * y) % 16 for x in range(W)]) for y in range(H)],
                             extra=chunk(b"PLTE", pal) + chunk(b"tRNS", trns))
cases["palette4"] = png(W, H, 4, 3, [pack_bits([(x * 5 + y) % 16 for x in range(W)], 4) for y in range(H)],
                        extra=chunk(b"PLTE", pal))
cases["palette2"] = png(W, H, 2, 3, [pack_bits([(x + y) % 4 for x in range(W)], 2) for y in range(H)],
                        extra=chunk(b"PLTE", pal[:12]))
# grey and RGB with a tRNS colour key: the key's pixels keep their value
cases["grey8_trns"] = png(W, H, 8, 0, [bytes([(50 * x + y) % 256 for x in range(W)]) for y in range(H)],
                          extra=chunk(b"tRNS", struct.pack(">H", 100)))
cases["rgb8_trns"] = png(W, H, 8, 2, [bytes([10, 20, 30] * W) if y == 1 else bytes([200, 150, 100] * W)
                                      for y in range(H)], extra=chunk(b"tRNS", be16([10, 20, 30])))
# low bit depths of grey: scaled to 0..255 (0, 85, 170, 255 for 2 bits)
for d in (1, 2, 4):
    cases[f"grey{d}"] = png(W, H, d, 0, [pack_bits([(x + 2 * y) % (1 << d) for x in range(W)], d) for y in range(H)])
def adam7(px):
    """The Adam7 raw stream of px (h, w, 3) uint8: the seven passes' scanlines, filter 0."""
    h, w, _ = px.shape
    out = b""
    for (y0, x0, dy, dx) in [(0, 0, 8, 8), (0, 4, 8, 8), (4, 0, 8, 4), (0, 2, 4, 4), (2, 0, 4, 2), (0, 1, 2, 2),
                             (1, 0, 2, 1)]:
        for y in range(y0, h, dy):
            row = px[y, x0::dx]
            if row.size:
                out += b"\0" + row.tobytes()
    return out
# Adam7 interlaced RGB (Pillow cannot write it: the passes are laid out here), the pixels random
px7 = rng.integers(0, 256, (H + 4, W + 6, 3)).astype(np.uint8)
cases["rgb8_adam7"] = png(px7.shape[1], px7.shape[0], 8, 2, adam7(px7), interlace=1)

for name, data in sorted(cases.items()):
    with open(os.path.join(HERE, name + ".png"), "wb") as f:
        f.write(data)
    im = Image.open(io.BytesIO(data))
    im.load()
    if im.mode == "I":  # 16-bit grey: the high byte (see above)
        hi = (np.asarray(im).astype(np.uint32) >> 8).astype(np.uint8)
        L, RGB = hi, np.repeat(hi[:, :, None], 3, axis=2)
    else:
        L, RGB = np.asarray(im.convert("L")), np.asarray(im.convert("RGB"))
    with open(os.path.join(HERE, name + ".L"), "wb") as f:
        f.write(L.tobytes())
    with open(os.path.join(HERE, name + ".RGB"), "wb") as f:
        f.write(RGB.tobytes())
    print(f"{name}: {im.mode} {im.size[0]}x{im.size[1]}")
