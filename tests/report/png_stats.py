#!/usr/bin/env python3
"""What a screenshot holds, for report_browser_test: png_stats.py FILE.png [RRGGBB ...]

Prints one JSON object: width, height, colours (distinct RGB values), non_white (the share of
pixels that are not near white), and for each RRGGBB given, how many pixels lie within 24 of
it in every channel (a chart's line or bar colour). Decodes 8-bit RGB and RGBA PNGs, which is
what chromium writes, with the standard library only.
"""
import json
import struct
import sys
import zlib


def decode(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise SystemExit(f"{path}: not a PNG file")
    pos, idat, header = 8, [], None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    width, height, depth, colour_type, _, _, interlace = header
    if depth != 8 or colour_type not in (2, 6) or interlace:
        raise SystemExit(f"{path}: only 8-bit RGB/RGBA, non-interlaced PNGs are read")
    channels = 3 if colour_type == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            up_left = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                pred = left if pa <= pb and pa <= pc else (up if pb <= pc else up_left)
                line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(line))
        previous = line
    return width, height, channels, rows


def main():
    path, wanted = sys.argv[1], [bytes.fromhex(c) for c in sys.argv[2:]]
    width, height, channels, rows = decode(path)
    colours, non_white = set(), 0
    near = [0] * len(wanted)
    for row in rows:
        for x in range(0, len(row), channels):
            rgb = row[x:x + 3]
            colours.add(rgb)
            if min(rgb) < 240:
                non_white += 1
            for k, c in enumerate(wanted):
                if all(abs(rgb[i] - c[i]) <= 24 for i in range(3)):
                    near[k] += 1
    print(json.dumps({
        "width": width, "height": height, "colours": len(colours),
        "non_white": round(non_white / (width * height), 4),
        "near": {c.hex(): n for c, n in zip(wanted, near)},
    }))


if __name__ == "__main__":
    main()
