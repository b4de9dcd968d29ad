"""Training-step memory: peak resident memory of one forward + backward of the per-token log-probs
with the chunked path (:func:`mintrl.logprobs.token_logprobs`) vs the naive full-logits path
(``log_softmax(model(x).logits)``), 16 x 256 tokens on the embedded model (CPU), each in a fresh
process, alternating, median of ``--repeats``. Target: ratio <= 0.5.

    .venv/bin/python benchmarks/logprob_memory.py [--rows 16 --tokens 256 --repeats 3]
"""

from __future__ import annotations

import argparse

from _common import median, peak_rss_mib, table

CHILD = r"""
import json, sys
import torch, torch.nn.functional as F
from mintrl.model import embedded_smollm2
from mintrl.logprobs import token_logprobs
mode, rows, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(0)
model = embedded_smollm2().model.train()
ids = torch.randint(10, 40000, (rows, tokens))
mask = torch.zeros_like(ids, dtype=torch.bool); mask[:, tokens // 4:] = True  # a quarter prompt, the rest response
attn = torch.ones_like(ids)
# warm-up on a small batch so that allocator and kernel set-up do not count as the measured peak
warm = torch.zeros(1, 16, dtype=torch.bool); warm[:, 4:] = True
token_logprobs(model, ids[:1, :16], attn[:1, :16], warm)[0].sum().backward(); model.zero_grad(set_to_none=True)
def kib(key):  # /proc/self/status field in KiB
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(key))
open("/proc/self/clear_refs", "w").write("5")  # reset the peak (VmHWM) to the current resident set
print(json.dumps({"baseline": kib("VmRSS:")}), flush=True)
if mode == "chunked":
    lp, _ = token_logprobs(model, ids, attn, mask, 1.0, 1024)
else:
    logp = F.log_softmax(model(input_ids=ids, attention_mask=attn).logits.float(), -1)
    lp = torch.zeros(ids.shape); lp[:, 1:] = logp[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
    lp = lp * mask
(lp.sum() / mask.sum()).backward()
print(json.dumps({"peak": kib("VmHWM:")}), flush=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    peaks: dict[str, list[float]] = {"chunked": [], "naive": []}
    for _ in range(args.repeats):
        for mode in peaks:
            peaks[mode].append(peak_rss_mib(CHILD, mode, str(args.rows), str(args.tokens)))
    c, n = median(peaks["chunked"]), median(peaks["naive"])
    table(f"training-step memory, {args.rows} x {args.tokens} tokens, forward + backward of the log-probs (CPU, fp32)",
          [("peak memory above the model: chunked / naive (target <= 0.5)", c / n, f"{c:.0f} MiB vs {n:.0f} MiB")],
          [f"medians of {args.repeats} fresh processes each, alternating; peak resident set (VmHWM, reset after a warm-up) minus the resident set then"])


if __name__ == "__main__":
    main()
