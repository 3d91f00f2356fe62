"""PyTorch peers of kiln's fused blocks, the same ops as bench_bandwidth's under the same names
(bias + GELU, residual + LayerNorm, softmax, log_softmax, RMSNorm, cross-entropy, SiLU gate),
eager and torch.compile, forward only, at rows x hidden (KILN_BENCH_ROWS, KILN_BENCH_HIDDEN;
default 8192 x 4096, the bundle's bandwidth-8192x4096 run), f32 and bf16.
Writes $OUT/peer_blocks.csv: block, dtype (kiln's names), mode, ms, GB/s of the ideal bytes."""
import os

import torch
import torch.nn.functional as F

from peer_common import compiled, device_name, time_ms, write_csv


def blocks(rows, hidden, dtype):
    """bench_bandwidth's blocks, op for op, under its names: name -> (function, ideal bytes)."""
    dev = "cuda"
    x = torch.randn(rows, hidden, device=dev, dtype=dtype)
    r = torch.randn(rows, hidden, device=dev, dtype=dtype)
    w = torch.randn(hidden, device=dev, dtype=dtype)
    b = torch.randn(hidden, device=dev, dtype=dtype)
    target = torch.randint(0, hidden, (rows,), device=dev)
    n = rows * hidden
    item = x.element_size()

    def residual_layer_norm():
        h = x + r
        return h, F.layer_norm(h, (hidden,), w, None, 1e-5)

    def rms_norm():
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(dtype) * w

    return {
        "bias + GELU": (lambda: F.gelu(x + b), 2 * n * item),
        "residual + LayerNorm": (residual_layer_norm, 4 * n * item),
        "softmax": (lambda: torch.softmax(x, -1) * b, 2 * n * item),
        "log_softmax": (lambda: torch.log_softmax(x, -1) + b, 2 * n * item),
        "RMSNorm": (rms_norm, 2 * n * item),
        "cross-entropy": (lambda: F.cross_entropy(x, target), n * item),
        "SiLU gate": (lambda: x * F.silu(r), 3 * n * item),
    }


def main():
    rows = int(os.environ.get("KILN_BENCH_ROWS", 8192))
    hidden = int(os.environ.get("KILN_BENCH_HIDDEN", 4096))
    out = []
    for dtype in (torch.float32, torch.bfloat16):
        for name, (fn, nbytes) in blocks(rows, hidden, dtype).items():
            modes = [("eager", fn)]
            c = compiled(fn)
            if c is not None:
                modes.append(("compile", c))
            for mode, f in modes:
                with torch.no_grad():
                    ms = time_ms(f)
                out.append({"block": name, "dtype": {torch.float32: "f32", torch.bfloat16: "bf16"}[dtype],
                            "mode": mode, "rows": rows, "hidden": hidden, "ms": round(ms, 4),
                            "gbps": round(nbytes / ms / 1e6, 1), "device": device_name()})
                print(f"{name:22s} {out[-1]['dtype']:9s} {mode:8s} {ms:8.3f} ms "
                      f"{out[-1]['gbps']:8.1f} GB/s")
    write_csv("peer_blocks", out)


if __name__ == "__main__":
    main()
