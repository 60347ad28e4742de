"""Build the small random-weight model that the default local target serves.

genbench measures servers, not models, so the local demo target needs a model
that is real to llama.cpp (a Llama-architecture GGUF with a BPE tokenizer and a
chat template) but costs nothing to obtain: no hub, no network. It is built
here, offline, in a few seconds, from a seeded generator, and cached.

The weights are random, but three things are rigged on purpose:

* Every reply is valid UTF-8 text. Random weights would otherwise pick byte
  tokens that are halves of a multi-byte character, and llama.cpp answers
  HTTP 500 when a reply ends inside one. The residual stream carries one
  constant dimension (`_BIAS_DIM`, never written by any layer), so after the
  final RMS norm that dimension is a large positive constant; the output
  rows of every token that must not appear are zero except a large negative
  weight there. That is an output bias in all but name: those tokens score
  about -100 and are never sampled, at any temperature.
* The end of a reply (`<|im_end|>`) and the end of a thought (`</think>`) get
  the same trick with a smaller weight (`_OFF_LOGIT`): never chosen on their
  own, so a reply always runs to `max_tokens`, yet a request can turn them
  back on with `logit_bias` (see docs/local-target.md).
* Ordinary tokens have small random output rows, so sampling wanders over
  the vocabulary and the text looks like shuffled English words.

The cache file name carries a hash of everything that shapes the file, so a
changed recipe never reuses a stale model, and it is written to a temporary
name and renamed, so two processes building it at once both end up with a
whole file.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from genbench.atomic import writing

# Bump when the recipe changes in a way the spec below does not capture.
RECIPE_VERSION = 1

BOS = "<|startoftext|>"
EOS = "<|im_end|>"
IM_START = "<|im_start|>"
THINK = "<think>"
END_THINK = "</think>"
# control tokens are hidden in output; <think> tags are user-defined so that
# llama.cpp renders them into the text and its reasoning parser can see them
CONTROL_TOKENS = (BOS, IM_START, EOS)
USER_TOKENS = (THINK, END_THINK)

# logit a suppressed token gets (never sampled) and one that is merely "off"
# (never sampled by itself, but a request's logit_bias can turn it on)
_NEVER_LOGIT = -100.0
_OFF_LOGIT = -30.0
_BIAS_DIM = 0

CHAT_TEMPLATE = """\
{%- for message in messages %}
{%- set content = message.content if message.content is string else '' %}
{%- if message.role == 'assistant' and message.reasoning_content %}
{%- set content = '<think>\\n' + message.reasoning_content + '\\n</think>\\n\\n' + content %}
{%- endif %}
{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|im_start|>assistant\\n' }}
{%- if enable_thinking is defined and enable_thinking %}
{{- '<think>\\n' }}
{%- endif %}
{%- endif %}
"""


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """The shape of a generated model; every field feeds the cache name."""

    name: str
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    vocab_size: int
    n_ctx_train: int
    seed: int
    corpus_words: int


SPECS: dict[str, ModelSpec] = {
    # 512 wide, 4 deep: slow enough per token that continuous batching pays off
    # visibly on a laptop CPU (256 wide, 2 deep is so fast that request overhead
    # dominates), small enough to build and load in seconds.
    "tiny": ModelSpec(
        name="genbench-tiny",
        n_embd=512,
        n_layer=4,
        n_head=8,
        n_head_kv=2,
        n_ff=1536,
        vocab_size=3072,
        n_ctx_train=16384,
        seed=20240611,
        corpus_words=120_000,
    ),
}


# ---------------------------------------------------------------- tokenizer corpus

# Common English words. The tokenizer corpus is built from them with a seeded
# generator, so the vocabulary is identical on every machine and Python version.
_WORD_TEXT = """
the of and to in a is that for it as was with be by on not he i this are or his from at
which but have an they you were her she there one all we their been has when who will
more no if out so said what up its about into than them can only other new some could
time these two may then do first any my now such like our over man me even most made
after also did many before must through back years where much your way well down should
because each just those people how too little state good very make world still own see
men work long get here between both life being under never day same another know while
last might us great old year off come since against go came right used take three states
himself few house use during without again place american around however home small
found thought went say part once general high upon school every does got united left
number course war until always away something fact though water less public put think
almost hand enough far took head yet government system better set told nothing night end
why called didn eyes find going look asked later knew point next program city business
give group toward young days let room president side social given present several order
national possible rather second face per among form important often things looked early
white case john become large big need four within felt along children saw best church
ever least power development light thing seemed family interest want members mind
country area others done turned although open god service certain kind problem began
different door thus help sense means whole matter perhaps itself york times law human
line above name example action company hands local show whether five history gave today
either act feet across taken past quite anything seen having death experience body word
half really week free car field already information tell together college shall money
period held keep sure probably real behind miss political question air office brought
whose special heard major problems ago became federal moment study available known
result street economic boy position reason change south board individual job society
areas west close turn love community true court force full seems am cost wife future age
voice center woman control common necessary following front sometimes six girl clear
further land run students provide feel party able mother music education university
child effect level stood military short town total outside rate art century north
washington leave therefore top strong policy black short believe value data model token
request server client stream batch queue latency throughput memory cache engine
benchmark measure report sample prompt answer reply reason think question text file line
record field error message time second minute hour rate speed load test run job input
output length count number value list table chart graph plot mean median tail peak
window slot thread process core worker task step phase start stop wait send read write
open close build check plan compare generate forecast estimate budget cost price limit
python code function class method module package library script command option flag
network port address host route path query header body status retry timeout failure
simple quick careful steady random fixed small large long short early late first final
"""
_WORDS = _WORD_TEXT.split()

_PUNCT = [".", ".", ".", ",", ",", ",", ";", ":", "?", "!"]


def _corpus(words: int, seed: int) -> list[str]:
    """Seeded pseudo-English: Zipf-weighted words, sentences, numbers, code-ish bits."""
    rng = random.Random(seed)
    vocab = list(dict.fromkeys(_WORDS))
    weights = [1.0 / (i + 1) ** 0.9 for i in range(len(vocab))]
    out: list[str] = []
    line: list[str] = []
    produced = 0
    while produced < words:
        n = rng.randint(4, 18)
        sent = rng.choices(vocab, weights, k=n)
        sent[0] = sent[0].capitalize()
        for i in range(1, n - 1):
            r = rng.random()
            if r < 0.04:
                sent[i] = str(rng.choice([rng.randint(0, 99), rng.randint(100, 9999)]))
            elif r < 0.06:
                sent[i] = sent[i].capitalize()
            elif r < 0.08:
                sent[i] = f"{sent[i]}_{rng.choice(vocab)}()"
            elif r < 0.14:
                sent[i] += rng.choice(_PUNCT[3:6])
        line.append(" ".join(sent) + rng.choice(_PUNCT[:3] + _PUNCT[-2:]))
        produced += n
        if rng.random() < 0.2:
            out.append(" ".join(line))
            line = []
    if line:
        out.append(" ".join(line))
    return out


def _train_tokenizer(spec: ModelSpec) -> tuple[list[str], list[str]]:
    """Train a byte-level BPE; return (tokens by id, merges as 'a b')."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=[*CONTROL_TOKENS, *USER_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(spec.corpus_words, spec.seed), trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    vocab: dict[str, int] = model["vocab"]
    tokens = [""] * len(vocab)
    for piece, i in vocab.items():
        tokens[i] = piece
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return tokens, merges


def _byte_decoder() -> dict[str, int]:
    """GPT-2's printable stand-in character for each byte, inverted."""
    bs = list(range(ord("!"), ord("~") + 1))
    bs += list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


def _suppressed(tokens: list[str]) -> list[int]:
    """Ids that must never be generated: specials, non-ASCII bytes, control characters."""
    dec = _byte_decoder()
    specials = set(CONTROL_TOKENS) | set(USER_TOKENS)
    out = []
    for i, piece in enumerate(tokens):
        if piece in specials:
            out.append(i)
            continue
        raw = bytes(dec[c] for c in piece)
        if any(b >= 0x80 or b == 0x7F or (b < 0x20 and b != 0x0A) for b in raw):
            out.append(i)
    return out


def _weights(spec: ModelSpec, tokens: list[str]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(spec.seed)
    d, v, ff = spec.n_embd, len(tokens), spec.n_ff
    hd = d // spec.n_head
    kv = hd * spec.n_head_kv

    def rand(*shape: int, scale: float) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * scale).astype(np.float32)

    # Residual dim _BIAS_DIM holds a constant 2*sqrt(d) that no layer writes to
    # (output rows zeroed), so after the final norm it is about sqrt(d)*0.9 for
    # every token at every position: a bias input for the output projection.
    bias_in = 2.0 * np.sqrt(d)
    embd = rand(v, d, scale=1.0)
    embd[:, _BIAS_DIM] = bias_in
    w: dict[str, np.ndarray] = {"token_embd.weight": embd}
    norm = np.ones(d, dtype=np.float32)
    norm[_BIAS_DIM] = 0.0  # layers ignore the bias dimension
    for i in range(spec.n_layer):
        p = f"blk.{i}."
        w[p + "attn_norm.weight"] = norm.copy()
        w[p + "attn_q.weight"] = rand(d, d, scale=d**-0.5)
        w[p + "attn_k.weight"] = rand(kv, d, scale=d**-0.5)
        w[p + "attn_v.weight"] = rand(kv, d, scale=d**-0.5)
        wo = rand(d, d, scale=0.5 * d**-0.5)
        wo[_BIAS_DIM] = 0.0
        w[p + "attn_output.weight"] = wo
        w[p + "ffn_norm.weight"] = norm.copy()
        w[p + "ffn_gate.weight"] = rand(ff, d, scale=d**-0.5)
        w[p + "ffn_up.weight"] = rand(ff, d, scale=d**-0.5)
        down = rand(d, ff, scale=0.5 * ff**-0.5)
        down[_BIAS_DIM] = 0.0
        w[p + "ffn_down.weight"] = down
    w["output_norm.weight"] = np.ones(d, dtype=np.float32)
    # the bias dimension after the final norm: bias_in / rms(x), rms ~ sqrt(5)
    h_bias = np.sqrt(d) * bias_in / np.sqrt(bias_in**2 + d)
    out = rand(v, d, scale=0.2)
    out[:, _BIAS_DIM] = 0.0
    for i in _suppressed(tokens):
        out[i] = 0.0
        out[i, _BIAS_DIM] = _NEVER_LOGIT / h_bias
    for piece in (EOS, END_THINK):
        i = tokens.index(piece)
        out[i] = 0.0
        out[i, _BIAS_DIM] = _OFF_LOGIT / h_bias
    w["output.weight"] = out
    return {k: (a if a.ndim == 1 else a.astype(np.float16)) for k, a in w.items()}


def _write_gguf(path: Path, spec: ModelSpec) -> None:
    import gguf

    tokens, merges = _train_tokenizer(spec)
    types = [gguf.TokenType.NORMAL] * len(tokens)
    for t in CONTROL_TOKENS:
        types[tokens.index(t)] = gguf.TokenType.CONTROL
    for t in USER_TOKENS:
        types[tokens.index(t)] = gguf.TokenType.USER_DEFINED

    w = gguf.GGUFWriter(path, "llama")
    w.add_name(spec.name)
    w.add_description("genbench local demo model: random weights, not a language model")
    w.add_context_length(spec.n_ctx_train)
    w.add_embedding_length(spec.n_embd)
    w.add_block_count(spec.n_layer)
    w.add_feed_forward_length(spec.n_ff)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head_kv)
    w.add_rope_dimension_count(spec.n_embd // spec.n_head)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(tokens))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index(BOS))
    w.add_eos_token_id(tokens.index(EOS))
    w.add_eot_token_id(tokens.index(EOS))
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)
    for name, arr in _weights(spec, tokens).items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def spec_hash(spec: ModelSpec) -> str:
    """Short hash of everything that shapes the file."""
    import tokenizers

    key = json.dumps(
        {
            "spec": asdict(spec),
            "recipe": RECIPE_VERSION,
            "template": CHAT_TEMPLATE,
            "words": _WORDS,
            "logits": [_NEVER_LOGIT, _OFF_LOGIT],
            # the BPE trainer's tie-breaking may change between major versions
            "tokenizers": tokenizers.__version__.split(".")[0],
        },
        sort_keys=True,
    )
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def default_cache_dir() -> Path:
    root = os.environ.get("GENBENCH_CACHE") or Path.home() / ".cache" / "genbench"
    return Path(root)


def model_path(kind: str = "tiny", cache_dir: str | Path | None = None) -> Path:
    """Where `ensure_model` puts (or finds) the model of this kind."""
    spec = _spec(kind)
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return root / "models" / f"{spec.name}-{spec_hash(spec)}.gguf"


def ensure_model(kind: str = "tiny", cache_dir: str | Path | None = None) -> Path:
    """Return the path of the cached model, building it first if it is missing.

    Safe under concurrency: each builder writes its own temporary file in the
    cache folder and renames it into place; the rename is atomic, and the
    files are identical, so whoever renames last changes nothing.
    """
    path = model_path(kind, cache_dir)
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with writing(path, shared=True) as f:  # gguf writes by name; fsync of `f` covers it
        _write_gguf(Path(f.name), _spec(kind))
    return path


def _spec(kind: str) -> ModelSpec:
    try:
        return SPECS[kind]
    except KeyError:
        from genbench.errors import UsageError

        raise UsageError(f"unknown local model kind {kind!r}; known: {', '.join(SPECS)}") from None
