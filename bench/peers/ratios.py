"""The bundle's kiln / PyTorch table: per benchmark, kiln's time over the peer's (eager and
torch.compile); below 1 kiln is faster. Reads what `run` left under $OUT: bandwidth.csv
(bench_bandwidth at 8192 x 4096), peer_blocks.csv, peer_gpt_train.csv, generate.csv
(bench_generate --csv) with peer_generate.csv. Writes
$OUT/peer_ratios.csv and prints the table. Needs only the standard library."""
import csv
import os


def rows_of(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def main():
    out = os.environ.get("OUT", "out")
    table = []  # (benchmark, kiln ms, eager ms, compile ms)
    kiln_blocks = {(r["block"], r["dtype"]): float(r["time_us"]) / 1e3
                   for r in rows_of(os.path.join(out, "bandwidth.csv"))
                   if r["bench"] == "bandwidth-8192x4096" and r["time_us"]}
    peer = {}
    for r in rows_of(os.path.join(out, "peer_blocks.csv")):
        peer.setdefault((r["block"], r["dtype"]), {})[r["mode"]] = float(r["ms"])
    for key, kiln_ms in sorted(kiln_blocks.items()):
        p = peer.get(key, {})
        table.append((f"{key[0]} {key[1]}", kiln_ms, p.get("eager"), p.get("compile")))
    gpt = {}
    for r in rows_of(os.path.join(out, "peer_gpt_train.csv")):
        if r.get("kiln_ms_per_step"):
            gpt.setdefault(r["size"], {"kiln": {}, "peer": {}})
            gpt[r["size"]]["peer"][r["mode"]] = float(r["ms_per_step"])
            gpt[r["size"]]["kiln"][r["mode"]] = float(r["kiln_ms_per_step"])
    for size, g in gpt.items():
        # kiln compiled against torch.compile, kiln eager against PyTorch eager.
        if "eager" in g["kiln"]:
            table.append((f"gpt {size} step (eager)", g["kiln"]["eager"], g["peer"].get("eager"),
                          None))
        if "compile" in g["kiln"]:
            table.append((f"gpt {size} step (compiled)", g["kiln"]["compile"], None,
                          g["peer"].get("compile")))
    # Decoding: kiln's graphed step against torch.compile(mode="reduce-overhead"), per token.
    peer_gen = {(r["batch"], r["weights"]): float(r["ms_per_token"])
                for r in rows_of(os.path.join(out, "peer_generate.csv")) if r["mode"] == "compile"}
    for r in rows_of(os.path.join(out, "generate.csv")):
        if r["model"] == "gpt" and r["graphs"] == "on" and r["ms_per_token"]:
            key = (r["batch"], r["weights"])
            table.append((f"gpt2-small decode B={key[0]} {key[1]}", float(r["ms_per_token"]),
                          None, peer_gen.get(key)))
    if not table:
        print("no kiln/peer pairs found under", out)
        return
    path = os.path.join(out, "peer_ratios.csv")
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["benchmark", "kiln_ms", "peer_eager_ms", "peer_compile_ms",
                    "kiln_over_eager", "kiln_over_compile"])
        print(f"  {'kiln / PyTorch':32s} {'kiln ms':>9s} {'/eager':>7s} {'/compile':>8s}")
        for name, k, e, c in table:
            re = k / e if e else None
            rc = k / c if c else None
            w.writerow([name, f"{k:.4f}", e or "", c or "", f"{re:.3f}" if re else "",
                        f"{rc:.3f}" if rc else ""])
            print(f"  {name:32s} {k:9.3f} {re if re else float('nan'):7.2f} "
                  f"{rc if rc else float('nan'):8.2f}")


if __name__ == "__main__":
    main()
