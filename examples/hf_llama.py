"""attnlab inside a Hugging Face transformers Llama: one training step and greedy generation with
``attn_implementation="attnlab"`` (lecture §7.7 training with flash attention, §8.4 Flash-Decoding), each
compared with transformers' own SDPA attention on the same weights.

    pip install 'attnlab[hf]'
    python examples/hf_llama.py                  # a tiny random Llama on the CPU, a few seconds
    python examples/hf_llama.py --device cuda    # the same in bfloat16 on a GPU (attnlab's Triton kernels)

1. ``attnlab.integrations.hf.register()`` makes "attnlab" an attention implementation of transformers.
2. A Llama model is built from a config (random weights, nothing downloaded) with it.
3. A training step on a right-padded batch: the padding goes to ``flash_attention_varlen``; the loss and
   the gradients are compared with SDPA's, then AdamW takes the step.
4. Greedy generation from left-padded prompts: the prompts' prefill and every decoding step run attnlab;
   a prompt alone (no padding) decodes through ``flash_decode`` over transformers' KV cache.
"""

from __future__ import annotations

import argparse

import torch
from transformers import AutoModelForCausalLM, LlamaConfig

import attnlab.integrations.hf

PROMPT_LENGTHS = (12, 7, 4)  # real tokens of each row; the rows are padded to the longest


def tiny_llama(device: str, dtype: torch.dtype):
    """A 2-layer Llama with grouped-query attention (4 query heads, 2 K/V heads of dim 32, a head dim the Triton
    kernels take), random weights."""
    config = LlamaConfig(vocab_size=101, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=64,
                         initializer_range=0.2, pad_token_id=0)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="attnlab", dtype=dtype)
    return model.to(device)


def padded_batch(lengths, *, left: bool, vocab: int, device: str, generator):
    """Token ids (B, L) and attention mask (B, L) of rows with ``lengths`` real tokens, padded with 0."""
    L = max(lengths)
    ids = torch.zeros(len(lengths), L, dtype=torch.long)
    mask = torch.zeros(len(lengths), L, dtype=torch.long)
    for b, n in enumerate(lengths):
        cols = slice(L - n, L) if left else slice(0, n)
        ids[b, cols] = torch.randint(1, vocab, (n,), generator=generator)
        mask[b, cols] = 1
    return ids.to(device), mask.to(device)


def training_step(model, ids, mask) -> dict:
    """Loss and gradients with attnlab and with SDPA at the same weights, then one AdamW step (attnlab)."""
    labels = ids.masked_fill(mask == 0, -100)  # no loss on padding
    grads = {}
    for impl in ("sdpa", "attnlab"):
        model.set_attn_implementation(impl)
        model.zero_grad(set_to_none=True)
        loss = model(ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        grads[impl] = (loss.item(), [p.grad.clone() for p in model.parameters()])
    torch.optim.AdamW(model.parameters(), lr=1e-3).step()  # the gradients of the attnlab pass
    worst = max((a - b).abs().max().item() for a, b in zip(grads["attnlab"][1], grads["sdpa"][1]))
    largest = max(g.abs().max().item() for g in grads["sdpa"][1])
    return dict(loss_attnlab=grads["attnlab"][0], loss_sdpa=grads["sdpa"][0], grad_max_diff=worst, grad_max=largest)


def generate(model, impl: str, ids, mask, new: int) -> torch.Tensor:
    model.set_attn_implementation(impl)
    out = model.generate(ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                         pad_token_id=0)
    return out[:, ids.shape[1]:]  # (B, new)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--new", type=int, default=8, help="tokens to generate (default: %(default)s)")
    args = p.parse_args(argv)
    if args.new < 1:
        p.error(f"--new must be a positive integer, got {args.new}")
    dtype = torch.float32 if args.device == "cpu" else torch.bfloat16
    attnlab.integrations.hf.register()
    model = tiny_llama(args.device, dtype)
    g = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    print(f"model: {sum(p.numel() for p in model.parameters()):,} parameters, attention "
          f"{model.config._attn_implementation!r}, {dtype}, {args.device}")

    ids, mask = padded_batch((16, 11, 5), left=False, vocab=vocab, device=args.device, generator=g)
    step = training_step(model.train(), ids, mask)
    print(f"training step on rows of 16, 11 and 5 tokens (right-padded): loss attnlab {step['loss_attnlab']:.6f}, "
          f"sdpa {step['loss_sdpa']:.6f}; largest gradient difference {step['grad_max_diff']:.2e} "
          f"(largest gradient {step['grad_max']:.2e})")

    model.eval()
    ids, mask = padded_batch(PROMPT_LENGTHS, left=True, vocab=vocab, device=args.device, generator=g)
    with torch.no_grad():
        ours, theirs = generate(model, "attnlab", ids, mask, args.new), generate(model, "sdpa", ids, mask, args.new)
        alone = generate(model, "attnlab", ids[-1:, -PROMPT_LENGTHS[-1]:], None, args.new)
    for b, n in enumerate(PROMPT_LENGTHS):
        print(f"prompt of {n:2d} tokens -> attnlab {ours[b].tolist()}  sdpa {theirs[b].tolist()}")
    same, same_alone = torch.equal(ours, theirs), torch.equal(alone[0], ours[-1])
    print(f"greedy tokens identical to sdpa's: {same}; the last prompt alone (no padding) gives the same "
          f"tokens: {same_alone}")
    return dict(step, same_as_sdpa=same, same_alone=same_alone, tokens=ours.tolist())


if __name__ == "__main__":
    main()
