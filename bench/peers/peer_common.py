"""Shared pieces of the PyTorch peers of kiln's benchmarks: timing with CUDA events, the GPU's
dense bf16 peak, and writing results under $OUT (CSV and JSON). Needs only torch."""
import csv
import json
import os

import torch

# Dense (no sparsity) bf16 tensor-core peaks, TFLOP/s, from NVIDIA's data sheets; by name prefix.
DENSE_BF16_TFLOPS = [
    ("H200", 989.0), ("H100 SXM", 989.0), ("H100 NVL", 835.0), ("H100 PCIe", 756.0),
    ("H100", 989.0), ("GH200", 989.0), ("B200", 2250.0), ("A100", 312.0), ("L40S", 362.0),
    ("L4", 121.0), ("A10", 125.0), ("RTX 4090", 165.0), ("RTX 3090", 71.0),
]


def out_dir():
    path = os.environ.get("OUT", "out")
    os.makedirs(path, exist_ok=True)
    return path


def device_name():
    return torch.cuda.get_device_name(0)


def peak_bf16_flops():
    """The device's dense bf16 peak in FLOP/s, or None when the name is not in the table."""
    name = device_name()
    for prefix, tflops in DENSE_BF16_TFLOPS:
        if prefix in name:
            return tflops * 1e12
    return None


def time_ms(fn, warmup=3, reps=20):
    """Median milliseconds of fn() on the current stream, timed with CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def write_csv(name, rows):
    """rows: a list of dicts with the same keys; written to $OUT/<name>.csv."""
    path = os.path.join(out_dir(), name + ".csv")
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        writer.writeheader()
        writer.writerows(rows)
    print("wrote", path)
    return path


def write_json(name, value):
    path = os.path.join(out_dir(), name + ".json")
    with open(path, "w") as f:
        json.dump(value, f, indent=1)
    print("wrote", path)
    return path


def compiled(fn):
    """torch.compile(fn), or None (with the reason printed) where it cannot compile here."""
    try:
        return torch.compile(fn)
    except Exception as e:  # no Triton, an old torch: the eager figures still stand
        print("torch.compile unavailable:", e)
        return None
