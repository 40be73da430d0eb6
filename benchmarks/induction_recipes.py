"""`python -m benchmarks.induction_recipes --name NAME [options]`: look for a recipe in which a true
induction head forms (docs/heads.md, "Watch induction heads form").

A plain training loop over the project's GPT (src/model/gpt.py, the same model code that
`experiment=induction_heads` trains) on a generated text: random strings s of --lo..--hi
letters of an --alpha-letter alphabet, each followed by up to --gap random letters and s again
(--reps copies at most), optionally after up to --pre random letters. Every --every steps it
prints, per layer, the best induction score on repeated probes of several lengths n (2n <= the
window; a true induction head scores high on every n, a head that attends a fixed distance back
on one), the best previous-token score per layer and the in-context score on the longest probe.
Run it at idle priority (`nice -n 19 chrt -i 0`) on a shared machine; OMP_NUM_THREADS=1.
"""

import argparse
import math
import random
import time

import torch
import torch.nn.functional as F

from src.model.gpt import GPT, GPTConfig
from src.model.head_scores import induction_score, previous_token_score


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--name", default="x")
    p.add_argument("--alpha", type=int, default=26)
    p.add_argument("--lo", type=int, default=8)
    p.add_argument("--hi", type=int, default=16)
    p.add_argument("--gap", type=int, default=0)  # max random filler between copies
    p.add_argument("--pre", type=int, default=0)  # max random filler before a pair
    p.add_argument("--distinct", type=int, default=0)
    p.add_argument("--reps", type=int, default=2)  # max copies of s
    p.add_argument("--T", type=int, default=32)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--mlp", type=int, default=0)
    p.add_argument("--pos", default="learned")
    p.add_argument("--bias", type=int, default=0)
    p.add_argument("--smear", type=int, default=0)  # model.smeared_keys
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--wd", type=float, default=0.0)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--minlr", type=float, default=0.1)  # ratio
    p.add_argument("--bs", type=int, default=32)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--every", type=int, default=250)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789αβγδεζηθικλμνξοπρστυφχψω"[: a.alpha]

    def gen(length=500_000, seed=0):
        rng = random.Random(seed)
        out, total = [], 0
        while total < length:
            piece = "".join(rng.choice(CHARS) for _ in range(rng.randint(0, a.pre))) if a.pre else ""
            L = rng.randint(a.lo, a.hi)
            if a.distinct and L <= len(CHARS):
                s = "".join(rng.sample(CHARS, L))
            else:
                s = "".join(rng.choice(CHARS) for _ in range(L))
            g = "".join(rng.choice(CHARS) for _ in range(rng.randint(0, a.gap))) if a.gap else ""
            piece += s + (g + s) * (rng.randint(2, a.reps) - 1)
            out.append(piece)
            total += len(piece)
        return "".join(out)[:length]

    text = gen()
    stoi = {c: i for i, c in enumerate(sorted(set(text)))}
    V = len(stoi)
    data = torch.tensor([stoi[c] for c in text])
    cfg = GPTConfig(
        vocab_size=V,
        context_window=a.T,
        embedding_dim=a.d,
        num_heads=a.heads,
        num_layers=a.layers,
        mlp_ratio=a.mlp,
        positional=a.pos,
        fused=True,
        bias=bool(a.bias),
        smeared_keys=bool(a.smear),
    )
    model = GPT(cfg)
    decay = [p_ for n_, p_ in model.named_parameters() if p_.dim() >= 2]
    nodecay = [p_ for n_, p_ in model.named_parameters() if p_.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": a.wd}, {"params": nodecay, "weight_decay": 0}], lr=a.lr, betas=(0.9, 0.99)
    )

    def lr_at(step):
        if step < a.warmup:
            return (step + 1) / a.warmup
        prog = (step - a.warmup) / max(1, a.steps - a.warmup)
        return a.minlr + 0.5 * (1 + math.cos(math.pi * prog)) * (1 - a.minlr)

    gen_probe = torch.Generator().manual_seed(123)
    NS = [n for n in (3, 5, 8, 12, 16) if 2 * n <= a.T]

    def probe(n, B=32):
        s = torch.stack([torch.randperm(V, generator=gen_probe)[:n] for _ in range(B)])
        return torch.cat([s, s], 1)

    PROBES = {n: probe(n) for n in NS}

    @torch.no_grad()
    def evaluate():
        model.eval()
        res = {}
        for n, x in PROBES.items():
            H, W = model.hidden_states(x, need_weights=True)
            res[n] = [induction_score(A, n).tolist() for A in W]
            if n == max(NS):
                res["prev"] = [previous_token_score(A).tolist() for A in W]
                logits = model.logits(H)
                CE = F.cross_entropy(logits[:, :-1].reshape(-1, V), x[:, 1:].reshape(-1), reduction="none")
                CE = CE.view(x.shape[0], -1)
                res["icl"] = float(CE[:, n:].mean() - CE[:, : n - 1].mean())
        model.train()
        return res

    t0 = time.time()
    losses = []
    for step in range(a.steps + 1):
        if step % a.every == 0 or step == a.steps:
            r = evaluate()
            ml = sum(losses) / len(losses) if losses else float("nan")
            losses = []
            layer_ind = " ".join(
                f"L{layer}:" + "/".join(f"{max(r[n][layer]):.2f}" for n in NS) for layer in range(a.layers)
            )
            prev = " ".join(f"{max(r['prev'][layer]):.2f}" for layer in range(a.layers))
            # the head whose worst score over the lengths n is best: >= 0.5 makes it a true induction head
            heads = [(layer, h_) for layer in range(a.layers) for h_ in range(a.heads)]
            L, h = max(heads, key=lambda lh: min(r[n][lh[0]][lh[1]] for n in NS))
            print(
                f"{a.name} s{step:5d} t{time.time() - t0:5.0f} loss {ml:.3f} icl {r['icl']:+.2f} "
                f"ind[n={NS}] {layer_ind} "
                f"| L{L}H{h} min-over-n {min(r[n][L][h] for n in NS):.2f} | prev {prev}",
                flush=True,
            )
        if step == a.steps:
            break
        for g_ in opt.param_groups:
            g_["lr"] = a.lr * lr_at(step)
        ix = torch.randint(0, len(data) - a.T - 1, (a.bs,))
        x = torch.stack([data[i : i + a.T] for i in ix])
        y = torch.stack([data[i + 1 : i + a.T + 1] for i in ix])
        H, _ = model.hidden_states(x)
        loss = F.cross_entropy(model.logits(H).reshape(-1, V), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())


if __name__ == "__main__":
    main()
