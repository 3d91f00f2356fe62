"""PyTorch peer of kiln's GPT training step (demos/gpt_train, demos/gpt_model.h): the same model
(token + position embeddings, pre-LN blocks with causal self-attention and a GELU-tanh MLP, final
LayerNorm, untied LM head), AdamW (0.9, 0.95, eps 1e-8), linear warmup + cosine to min_lr,
gradient clipping at 1.0, on the same synthetic task (each target is a fixed permutation of the
previous token), eager and torch.compile.

  --kiln-dir DIR   gpt_train --export DIR's output: the model starts from kiln's initial weights
                   (gpt_init.safetensors) at kiln's sizes, and kiln's losses and step times
                   (kiln_eager.json, kiln_compiled.json) are set next to PyTorch's
  --gpt2-small     also GPT-2 small: 12 layers, d 768, 12 heads, vocab 50257, T 1024, autocast
                   bf16, the largest batch (of 32, 16, 8, 4, 2, 1) that fits
Writes $OUT/peer_gpt_train.csv and .json: per size and mode, ms per warm step, tokens/s and MFU
(6 N + 12 L d T FLOPs per token, N the parameters less the position table, over the GPU's dense
bf16 peak), and the first losses. Needs torch and safetensors."""
import argparse
import json
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from peer_common import compiled, device_name, peak_bf16_flops, write_csv, write_json


class Block(nn.Module):
    def __init__(self, d, heads, mlp_ratio):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, mlp_ratio * d)
        self.fc2 = nn.Linear(mlp_ratio * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.token_embedding = nn.Embedding(c["vocab"], c["d_model"])
        self.position_embedding = nn.Embedding(c["seq_len"], c["d_model"])
        self.blocks = nn.ModuleList(Block(c["d_model"], c["heads"], c["mlp_ratio"])
                                    for _ in range(c["layers"]))
        self.final_ln = nn.LayerNorm(c["d_model"])
        self.lm_head = nn.Linear(c["d_model"], c["vocab"], bias=False)

    def forward(self, tokens, targets):
        t = tokens.shape[1]
        x = self.token_embedding(tokens) + self.position_embedding.weight[:t]
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.final_ln(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.view(-1),
                               ignore_index=-100)


# kiln's parameter names (nn::Module::state_dict) -> this model's.
def kiln_name(name):
    name = name.replace(".attn.qkv.", ".qkv.").replace(".attn.proj.", ".proj.")
    return name.replace(".mlp.fc1.", ".fc1.").replace(".mlp.fc2.", ".fc2.")


def load_kiln_weights(model, path):
    from safetensors.torch import load_file
    state = {kiln_name(k): v for k, v in load_file(path).items() if not k.endswith("future_mask")}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise SystemExit(f"{path}: missing {missing}, unexpected {unexpected}")


def batch_of(c, batch, gen):
    vocab, t = c["vocab"], c["seq_len"]
    a = 5
    while math.gcd(a, vocab) != 1:
        a += 1
    tokens = torch.randint(0, vocab, (batch, t), generator=gen)
    targets = torch.cat([torch.full((batch, 1), -100), (tokens[:, :-1] * a + 3) % vocab], 1)
    return tokens.cuda(non_blocking=True), targets.cuda(non_blocking=True)


def lr_at(c, step):
    if step < c["warmup_steps"]:
        return c["lr"] * step / c["warmup_steps"]
    progress = min(1.0, (step - c["warmup_steps"]) / max(1, c["steps"] - c["warmup_steps"]))
    return c["min_lr"] + 0.5 * (c["lr"] - c["min_lr"]) * (1 + math.cos(math.pi * progress))


def train(c, mode, batch, weights=None):
    torch.manual_seed(c.get("seed", 1))
    model = Gpt(c).cuda()
    if weights:
        load_kiln_weights(model, weights)
    opt = torch.optim.AdamW(model.parameters(), lr=c["lr"], betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=c["weight_decay"])
    loss_fn = model if mode == "eager" else compiled(model)
    if loss_fn is None:
        return None
    amp = c.get("autocast", "none")
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}.get(amp)
    scaler = torch.cuda.amp.GradScaler(enabled=dtype == torch.float16)
    gen = torch.Generator().manual_seed(2)
    losses, step_ms = [], []
    for step in range(c["steps"]):
        tokens, targets = batch_of(c, batch, gen)
        for group in opt.param_groups:
            group["lr"] = lr_at(c, step)
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=dtype, enabled=dtype is not None):
            loss = loss_fn(tokens, targets)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), c["clip_norm"])
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())  # the one wait per step, as kiln's demo reads its loss
        step_ms.append((time.perf_counter() - t0) * 1e3)
    params = sum(p.numel() for p in model.parameters()) - model.position_embedding.weight.numel()
    return {"losses": losses, "step_ms": step_ms, "params": params}


def figures(c, mode, batch, run, kiln=None):
    warm = run["step_ms"][2:] or run["step_ms"][1:]
    ms = sorted(warm)[len(warm) // 2]
    tokens = batch * c["seq_len"]
    flops = tokens * (6 * run["params"] + 12 * c["layers"] * c["d_model"] * c["seq_len"])
    peak = peak_bf16_flops()
    row = {"size": c["name"], "mode": mode, "batch": batch, "seq_len": c["seq_len"],
           "autocast": c.get("autocast", "none"), "ms_per_step": round(ms, 3),
           "tokens_per_s": round(tokens / ms * 1e3), "mfu": round(flops / (ms / 1e3) / peak, 4)
           if peak else "", "first_loss": round(run["losses"][0], 4),
           "last_loss": round(run["losses"][-1], 4), "device": device_name()}
    if kiln:
        kwarm = [x for x in kiln["step_ms"][1:] if x is not None]
        kms = sorted(kwarm)[len(kwarm) // 2] if kwarm else float("nan")
        row["kiln_ms_per_step"] = round(kms, 3)
        row["kiln_over_peer"] = round(kms / ms, 3)
        row["kiln_first_loss"] = kiln["losses"][0]
    print(row)
    return row


def largest_batch(c, mode):
    for batch in (32, 16, 8, 4, 2, 1):
        try:
            trial = dict(c, steps=3)
            run = train(trial, mode, batch)
            torch.cuda.empty_cache()
            return batch, run
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
    raise SystemExit("gpt2-small: not even batch 1 fits")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln-dir")
    ap.add_argument("--gpt2-small", action="store_true")
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    rows, runs = [], {}
    if args.kiln_dir:
        kiln = {}
        for mode in ("eager", "compiled"):
            path = os.path.join(args.kiln_dir, f"kiln_{mode}.json")
            if os.path.exists(path):
                with open(path) as f:
                    kiln[mode] = json.load(f)
        base = next(iter(kiln.values()))
        c = dict(base, name="demo", seed=1)
        weights = os.path.join(args.kiln_dir, "gpt_init.safetensors")
        for mode, kiln_mode in (("eager", "eager"), ("compile", "compiled")):
            run = train(c, mode, c["batch"], weights)
            if run:
                runs[f"demo/{mode}"] = run
                rows.append(figures(c, mode, c["batch"], run, kiln.get(kiln_mode)))
    if args.gpt2_small:
        c = {"name": "gpt2-small", "vocab": 50257, "seq_len": 1024, "d_model": 768, "heads": 12,
             "layers": 12, "mlp_ratio": 4, "steps": args.steps, "lr": 6e-4, "min_lr": 6e-5,
             "warmup_steps": 2, "weight_decay": 0.1, "clip_norm": 1.0, "autocast": "bf16"}
        for mode in ("eager", "compile"):
            batch, _ = largest_batch(c, mode)
            run = train(c, mode, batch)
            if run:
                runs[f"gpt2-small/{mode}"] = run
                rows.append(figures(c, mode, batch, run))
    if not rows:
        raise SystemExit("nothing to run: give --kiln-dir and/or --gpt2-small")
    write_csv("peer_gpt_train", rows)
    write_json("peer_gpt_train", {"rows": rows, "runs": runs})


if __name__ == "__main__":
    main()
