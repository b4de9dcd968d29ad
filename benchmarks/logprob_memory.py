"""Training-step memory: peak resident memory of one forward + backward of the per-token log-probs
with the chunked path (:func:`mintrl.model.logprobs.token_logprobs`) vs the naive full-logits path
(``log_softmax(model(x).logits)``), 16 x 256 tokens on the embedded model (CPU), each in a fresh
process, alternating, median of ``--repeats``. Target: ratio <= 0.5.

Measured with and without activation checkpointing of the transformer body
(``module.gradient_checkpointing``, the same on both sides of a ratio): with it, the body's saved
activations shrink to about one layer's worth and the log-prob computation (LM head, log-softmax,
gather and their backward) is what the peak is made of; without it, the 30 layers' activations,
which both paths share, dominate both peaks.

    .venv/bin/python benchmarks/logprob_memory.py [--rows 16 --tokens 256 --repeats 2 --device cpu|cuda]
"""

from __future__ import annotations

import argparse

from _common import median, peak_rss_mib, table

CHILD = r"""
import json, sys
import torch, torch.nn.functional as F
from mintrl.model import embedded_smollm2
from mintrl.model.logprobs import token_logprobs
mode, rows, tokens, checkpointing, device = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5]
torch.manual_seed(0)
model = embedded_smollm2().model.to(device).train()
if checkpointing:
    from mintrl.training.module import enable_gradient_checkpointing
    enable_gradient_checkpointing(model)
ids = torch.randint(10, 40000, (rows, tokens), device=device)
mask = torch.zeros_like(ids, dtype=torch.bool); mask[:, tokens // 4:] = True  # a quarter prompt, the rest response
attn = torch.ones_like(ids)
# warm-up on a small batch so that allocator and kernel set-up do not count as the measured peak
warm = torch.zeros(1, 16, dtype=torch.bool); warm[:, 4:] = True
token_logprobs(model, ids[:1, :16], attn[:1, :16], warm)[0].sum().backward(); model.zero_grad(set_to_none=True)
def kib(key):  # /proc/self/status field in KiB; on a GPU, torch's allocated device memory
    if device != "cpu":
        return (torch.cuda.memory_allocated() if key == "VmRSS:" else torch.cuda.max_memory_allocated()) // 1024
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(key))
open("/proc/self/clear_refs", "w").write("5")  # reset the peak (VmHWM) to the current resident set
if device != "cpu":
    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
print(json.dumps({"baseline": kib("VmRSS:")}), flush=True)
if mode == "chunked":
    lp, _ = token_logprobs(model, ids, attn, mask, 1.0, 256)  # module.logprob_chunk_tokens default
else:
    logp = F.log_softmax(model(input_ids=ids, attention_mask=attn, use_cache=False).logits.float(), -1)
    lp = torch.zeros(ids.shape, device=device); lp[:, 1:] = logp[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
    lp = lp * mask
(lp.sum() / mask.sum()).backward()
if device != "cpu":
    torch.cuda.synchronize()
print(json.dumps({"peak": kib("VmHWM:")}), flush=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--device", default="cpu", help="cpu (peak resident set) or cuda (peak memory allocated by torch)"
    )
    args = parser.parse_args()
    variants = [(mode, ckpt) for ckpt in ("1", "0") for mode in ("chunked", "naive")]
    peaks: dict[tuple[str, str], list[float]] = {v: [] for v in variants}
    for _ in range(args.repeats):
        for mode, ckpt in variants:
            peaks[mode, ckpt].append(peak_rss_mib(CHILD, mode, str(args.rows), str(args.tokens), ckpt, args.device))
    m = {v: median(p) for v, p in peaks.items()}
    rows = [
        (
            f"chunked / naive, {label} (target <= 0.5)",
            m["chunked", ckpt] / m["naive", ckpt],
            f"{m['chunked', ckpt]:.0f} MiB vs {m['naive', ckpt]:.0f} MiB",
        )
        for ckpt, label in (("1", "body checkpointed on both sides"), ("0", "no checkpointing on either side"))
    ]
    rows.append(
        (
            "chunked + checkpointing / naive without",
            m["chunked", "1"] / m["naive", "0"],
            f"{m['chunked', '1']:.0f} MiB vs {m['naive', '0']:.0f} MiB",
        )
    )
    table(
        f"training-step memory, {args.rows} x {args.tokens} tokens, forward + backward of the log-probs ({args.device}, fp32)",
        rows,
        [
            f"peak memory above the loaded model; medians of {args.repeats} fresh processes each, alternating; peak resident set",
            "(VmHWM, reset after a warm-up) minus the resident set then",
        ],
    )


if __name__ == "__main__":
    main()
