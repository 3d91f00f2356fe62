"""The PyTorch peer of bench_generate, written as gpt-fast decodes: GPT-2 small's architecture
(d_model 768, 12 layers, 12 heads, vocab 50257, random weights) in bf16, a static KV cache written
with index_copy_, the one-token step under torch.compile(mode="reduce-overhead") (a CUDA graph
replay) and greedy argmax on the device; weight-only int8 as gpt-fast's WeightOnlyInt8Linear
(F.linear(x, w_int8.to(x.dtype)) * scales, one scale per output channel). At B = 1 and 8, prompt
16, eager and compiled. Writes $OUT/peer_generate.csv: model, batch, weights, mode, ms per token,
tokens/s, and the GB/s of the bytes a token reads (weights once, the live cache once)."""
import os

import torch
import torch.nn.functional as F

from peer_common import device_name, write_csv

VOCAB, D, LAYERS, HEADS, PROMPT, TOKENS = 50257, 768, 12, 12, 16, 64


class Int8Linear(torch.nn.Module):
    """gpt-fast's WeightOnlyInt8Linear: int8 weight, a bf16 scale per output channel."""

    def __init__(self, linear):
        super().__init__()
        w = linear.weight.detach().float()
        scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127
        self.register_buffer("weight", torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scales", scale.to(linear.weight.dtype))
        self.bias = linear.bias

    def forward(self, x):
        y = F.linear(x, self.weight.to(x.dtype)) * self.scales
        return y if self.bias is None else y + self.bias


class Block(torch.nn.Module):
    def __init__(self, batch, seq):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(D), torch.nn.LayerNorm(D)
        self.qkv, self.proj = torch.nn.Linear(D, 3 * D), torch.nn.Linear(D, D)
        self.fc1, self.fc2 = torch.nn.Linear(D, 4 * D), torch.nn.Linear(4 * D, D)
        shape = (batch, HEADS, seq, D // HEADS)
        self.register_buffer("k_cache", torch.zeros(shape))
        self.register_buffer("v_cache", torch.zeros(shape))

    def forward(self, x, rows, mask):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
        heads = lambda y: y.view(b, t, HEADS, D // HEADS).transpose(1, 2)
        self.k_cache.index_copy_(2, rows, heads(k))
        self.v_cache.index_copy_(2, rows, heads(v))
        y = F.scaled_dot_product_attention(heads(q), self.k_cache, self.v_cache, attn_mask=mask)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class Gpt(torch.nn.Module):
    def __init__(self, batch, seq):
        super().__init__()
        self.wte, self.wpe = torch.nn.Embedding(VOCAB, D), torch.nn.Embedding(seq, D)
        self.blocks = torch.nn.ModuleList(Block(batch, seq) for _ in range(LAYERS))
        self.ln, self.head = torch.nn.LayerNorm(D), torch.nn.Linear(D, VOCAB, bias=False)
        self.register_buffer("causal", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

    def forward(self, tokens, rows):
        x = self.wte(tokens) + self.wpe(rows)
        mask = self.causal[rows]  # [T, seq]: each new token sees the rows up to its own
        for block in self.blocks:
            x = block(x, rows, mask)
        return self.head(self.ln(x))


def quantize(module):
    for name, child in module.named_children():
        if isinstance(child, torch.nn.Linear):
            setattr(module, name, Int8Linear(child))
        else:
            quantize(child)


def step(model, tokens, rows):
    logits = model(tokens, rows)
    return torch.argmax(logits[:, -1], dim=-1, keepdim=True), rows[-1:] + 1


def token_bytes(model, batch, live):
    weights = sum(t.numel() * t.element_size() for n, t in model.state_dict().items()
                  if "cache" not in n and n != "causal" and not n.startswith("wte"))
    weights += batch * D * 2  # the token embedding's rows
    return weights + 2 * LAYERS * batch * live * D * 2


def main():
    torch.manual_seed(0)
    out = []
    for weights in ("bf16", "int8"):
        for batch in (1, 8):
            seq = PROMPT + TOKENS + 8
            model = Gpt(batch, seq).cuda().to(torch.bfloat16).eval()
            if weights == "int8":
                quantize(model)
            for mode in ("eager", "compile"):
                fn = step
                if mode == "compile":
                    try:
                        fn = torch.compile(step, mode="reduce-overhead", fullgraph=True)
                    except Exception as e:  # no Triton: the eager figures still stand
                        print("torch.compile unavailable:", e)
                        continue
                with torch.no_grad():
                    prompt = torch.randint(0, VOCAB, (batch, PROMPT), device="cuda")
                    model(prompt, torch.arange(PROMPT, device="cuda"))
                    tokens = prompt[:, -1:]
                    rows = torch.tensor([PROMPT], device="cuda")
                    for _ in range(4):  # warm: compile, record the graph
                        tokens, rows = fn(model, tokens, rows)
                        tokens, rows = tokens.clone(), rows.clone()
                    rows = torch.tensor([PROMPT], device="cuda")
                    start = torch.cuda.Event(enable_timing=True)
                    end = torch.cuda.Event(enable_timing=True)
                    start.record()
                    for _ in range(TOKENS):
                        tokens, rows = fn(model, tokens, rows)
                        tokens, rows = tokens.clone(), rows.clone()
                    end.record()
                    end.synchronize()
                ms = start.elapsed_time(end) / TOKENS
                nbytes = token_bytes(model, batch, PROMPT + TOKENS // 2)
                out.append({"model": "gpt2-small", "batch": batch, "weights": weights,
                            "mode": mode, "ms_per_token": round(ms, 4),
                            "tokens_per_s": round(1e3 / ms, 1),
                            "gbps": round(nbytes / ms / 1e6, 1), "device": device_name()})
                print(f"gpt2-small B={batch} {weights:5s} {mode:8s} {ms:8.3f} ms/token "
                      f"{out[-1]['tokens_per_s']:8.1f} tok/s {out[-1]['gbps']:8.1f} GB/s")
    write_csv("peer_generate", out)


if __name__ == "__main__":
    main()
