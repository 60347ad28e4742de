#!/usr/bin/env python3
"""Build a tiny random-weight Llama (model + tokenizer + chat template) for the vLLM test server.

Runs offline in seconds inside the vLLM venv (needs torch, transformers, tokenizers):

    python scripts/build_tiny_hf_model.py --out .cache/vllm-model

Deterministic: fixed corpus generator, fixed seeds, so the same script and library versions
give the same files.

What it makes:

* Tokenizer: byte-level BPE trained with `tokenizers` on a generated English-like corpus, so
  any input text encodes. Special tokens `<|endoftext|>` (pad), `<|im_start|>`, `<|im_end|>`
  (EOS). `<think>` and `</think>` are added as NON-special tokens: vLLM decodes with
  skip_special_tokens=True, so special ones would vanish before the qwen3 reasoning parser
  sees them.
* Chat template: ChatML like Qwen3. The generation prompt ends with `<think>\\n`, so the
  model's output is reasoning until it emits `</think>`. `enable_thinking=False` (via
  chat_template_kwargs) pre-fills an empty `<think>\\n\\n</think>\\n\\n`.
* Weights: random (seeded) LlamaForCausalLM, plus one trick so that sampled text is always
  valid: hidden dimension 0 of the residual stream is a constant (every token embedding has
  EMB_CONST there; no layer reads or writes it), so after the final RMSNorm h[0] > 0 at every
  position. lm_head rows of tokens that must never be generated get -SUPPRESS in column 0,
  i.e. a logit penalty of hundreds: byte tokens that are not complete UTF-8 (they would make
  vLLM stream U+FFFD), control characters, `<|endoftext|>`, `<|im_start|>` and `<think>`.
  `<|im_end|>` (EOS) and `</think>` stay ordinary random rows, so `logit_bias` moves them the
  usual way (e.g. {"</think>": 100} closes the thought at the first token).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

_WORDS_TEXT = """
the of and to in is was for on that with as by it at from his an were are which this be
has had not have one their its first after new who they two her she been other when there
all during into school time may years more most only over city some world would where later
up such used many can state about national out known university united then made high
film than between part under both album called team series well year government while three
season since century people three music group song game war area number through because
before life like each name good long water light small river house power system data model
token server request stream latency batch queue cache memory thread process engine forecast
speed quick brown fox jumps lazy dog red blue green yellow white black north south east
west early late open close start stop begin end left right inside outside above below near
far young old great little big large short tall strong weak happy sad bright dark warm cold
simple complex clear rough smooth loud quiet fast slow heavy empty full rich poor free busy
think reason answer question result value table chart figure paper book letter story word
line page point step path road field garden forest mountain valley ocean island market
village street bridge tower window door room table chair bread apple orange coffee tea milk
"""
WORDS = _WORDS_TEXT.split()

PUNCT = [".", ".", ".", ",", ",", "?", "!", ";", ":"]

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'text' %}{{- part['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- else %}"
    "{{- '<think>\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)


def corpus(n_lines: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for _ in range(n_lines):
        sents = []
        for _ in range(rng.randint(1, 4)):
            n = rng.randint(3, 14)
            words = [rng.choice(WORDS) for _ in range(n)]
            if rng.random() < 0.3:
                words.insert(rng.randrange(n), str(rng.randint(0, 2025)))
            words[0] = words[0].capitalize()
            sents.append(" ".join(words) + rng.choice(PUNCT))
        lines.append(" ".join(sents))
    return lines


def build_tokenizer(vocab_size: int, seed: int):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(20000, seed), trainer=trainer)
    # Not special: must survive skip_special_tokens=True in vLLM's detokenizer.
    tok.add_tokens(
        [
            AddedToken(THINK_OPEN, special=False, normalized=False),
            AddedToken(THINK_CLOSE, special=False, normalized=False),
        ]
    )
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        model_max_length=4096,
        clean_up_tokenization_spaces=False,
    )
    hf.chat_template = CHAT_TEMPLATE
    return hf


def suppressed_token_ids(hf) -> list[int]:
    """Tokens the random model must never generate."""
    from tokenizers.pre_tokenizers import ByteLevel

    byte_decoder = {c: b for b, c in _bytes_to_unicode().items()}
    assert set(byte_decoder) == set(ByteLevel.alphabet())
    vocab = hf.get_vocab()
    keep_specials = {hf.convert_tokens_to_ids("<|im_end|>"), vocab[THINK_CLOSE]}
    bad = []
    for token, idx in vocab.items():
        if idx in keep_specials:
            continue
        if token in SPECIAL or token == THINK_OPEN:
            bad.append(idx)
            continue
        try:
            raw = bytes(byte_decoder[c] for c in token)
            text = raw.decode("utf-8")
        except (KeyError, UnicodeDecodeError):
            bad.append(idx)
            continue
        if any((ord(ch) < 32 and ch not in "\n\t") or ord(ch) == 127 for ch in text):
            bad.append(idx)
            continue
        if any(ord(ch) > 127 for ch in text):
            # Valid multi-byte characters are fine but the corpus is ASCII, so the only
            # non-ASCII tokens are lone bytes; keep output plain ASCII.
            bad.append(idx)
    return sorted(bad)


def _bytes_to_unicode() -> dict[int, str]:
    # GPT-2's byte <-> printable-unicode map, which the ByteLevel pre-tokenizer uses.
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("\xa1"), ord("\xac") + 1))
        + list(range(ord("\xae"), ord("\xff") + 1))
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs), strict=True))


def build_model(hf, args) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(args.seed)
    vocab_size = len(hf)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=hf.eos_token_id,
        pad_token_id=hf.pad_token_id,
        initializer_range=0.02,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    model.eval()
    # Logits with std ~ initializer_range * sqrt(hidden) are nearly flat; a wider lm_head
    # gives the random model some preferences (greedy decoding settles into loops, which
    # n-gram speculation then predicts).
    lm_std = args.lm_head_std
    with torch.no_grad():
        model.lm_head.weight.normal_(0.0, lm_std)
        emb = model.model.embed_tokens.weight
        # Dimension 0 of the residual stream: constant, never read or written by a layer.
        emb[:, 0] = args.emb_const
        for layer in model.model.layers:
            for lin in (
                layer.self_attn.q_proj,
                layer.self_attn.k_proj,
                layer.self_attn.v_proj,
                layer.mlp.gate_proj,
                layer.mlp.up_proj,
            ):
                lin.weight[:, 0] = 0.0  # do not read dim 0
            layer.self_attn.o_proj.weight[0, :] = 0.0  # do not write dim 0
            layer.mlp.down_proj.weight[0, :] = 0.0
        # Column 0 of lm_head multiplies the (positive) constant: 0 for ordinary tokens,
        # a large negative weight for tokens that must never be sampled.
        model.lm_head.weight[:, 0] = 0.0
        bad = suppressed_token_ids(hf)
        model.lm_head.weight[bad, 0] = -args.suppress
    model.generation_config = GenerationConfig(
        eos_token_id=hf.eos_token_id,
        pad_token_id=hf.pad_token_id,
    )
    out = Path(args.out)
    model.save_pretrained(out, safe_serialization=True)
    hf.save_pretrained(out)
    info = {
        "vocab_size": vocab_size,
        "suppressed_tokens": len(bad),
        "params": sum(p.numel() for p in model.parameters()),
        "think_open_id": hf.convert_tokens_to_ids(THINK_OPEN),
        "think_close_id": hf.convert_tokens_to_ids(THINK_CLOSE),
        "eos_id": hf.eos_token_id,
        "args": vars(args),
    }
    (out / "genbench_model_info.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info))


def self_check(out: str) -> None:
    """Greedy and sampled generations decode to clean text; <think> handling is right."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    close_id = tok.convert_tokens_to_ids(THINK_CLOSE)
    assert tok.decode([close_id], skip_special_tokens=True) == THINK_CLOSE
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "Say something about the weather."}],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert prompt.endswith("<|im_start|>assistant\n<think>\n"), prompt
    ids = tok(prompt, return_tensors="pt").input_ids
    torch.manual_seed(0)
    with torch.no_grad():
        for do_sample in (False, True):
            gen = model.generate(
                ids, max_new_tokens=64, do_sample=do_sample, min_new_tokens=64, pad_token_id=0
            )
            text = tok.decode(gen[0, ids.shape[1] :], skip_special_tokens=True)
            assert "\ufffd" not in text and text.isascii(), repr(text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--vocab-size", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--intermediate", type=int, default=768)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--lm-head-std", type=float, default=0.1)
    p.add_argument("--emb-const", type=float, default=1.0)
    p.add_argument("--suppress", type=float, default=1000.0)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--no-check", action="store_true")
    args = p.parse_args()
    hf = build_tokenizer(args.vocab_size, args.seed)
    build_model(hf, args)
    if not args.no_check:
        self_check(args.out)


if __name__ == "__main__":
    main()
