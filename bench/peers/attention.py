"""PyTorch peer of bench_attention: causal F.scaled_dot_product_attention on the flash backend,
forward and forward + backward, bf16, at KILN_BENCH_BATCH x KILN_BENCH_HEADS x KILN_BENCH_T x
KILN_BENCH_D (defaults 1 x 4 x 1024 x 64, bench_attention's). Writes $OUT/peer_attention.csv:
pass, ms and TFLOP/s (causal: half of 4 B H T^2 D for the forward, 2.5x that for both)."""
import os

import torch
import torch.nn.functional as F

from peer_common import device_name, time_ms, write_csv


def main():
    batch = int(os.environ.get("KILN_BENCH_BATCH", 1))
    heads = int(os.environ.get("KILN_BENCH_HEADS", 4))
    t = int(os.environ.get("KILN_BENCH_T", 1024))
    d = int(os.environ.get("KILN_BENCH_D", 64))
    shape = (batch, heads, t, d)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    dout = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    try:  # torch >= 2.3
        from torch.nn.attention import SDPBackend, sdpa_kernel
        ctx = sdpa_kernel(SDPBackend.FLASH_ATTENTION)
    except ImportError:
        ctx = torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False,
                                             enable_mem_efficient=False)

    def forward():
        with torch.no_grad():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def forward_backward():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(dout)

    fwd_flops = 4 * batch * heads * t * t * d / 2
    rows = []
    with ctx:
        for name, fn, flops in (("forward", forward, fwd_flops),
                                ("forward+backward", forward_backward, 3.5 * fwd_flops)):
            ms = time_ms(fn)
            rows.append({"pass": name, "batch": batch, "heads": heads, "t": t, "d": d,
                         "ms": round(ms, 4), "tflops": round(flops / ms / 1e9, 1),
                         "device": device_name()})
            print(f"sdpa flash {name:17s} {ms:8.3f} ms {rows[-1]['tflops']:7.1f} TFLOP/s")
    write_csv("peer_attention", rows)


if __name__ == "__main__":
    main()
