"""t_tokenizer_json.py — `zerotrain tokenize`, `sample` and `eval` with a Hugging Face tokenizer.json,
against the `tokenizers` package (pinned by scripts/install-deps.sh; no downloads). Two tiny byte-level
BPE tokenizers are trained here on the bundled corpus: GPT-2 style (ByteLevel pre-tokenizer with its
regex), Llama 3 style (Split with Llama 3's regex, ByteLevel without, ignore_merges) and Qwen2 style
(Qwen2's regex, one digit a piece), each with special tokens (<|endoftext|>, <|begin_of_text|>,
<|end_of_text|>) and a non-special added token; and Qwen2 style with Qwen2's NFC normalizer, compared
on decomposed text (combining marks, Hangul jamo, marks to reorder, a composition exclusion), on
added tokens normalized and not beside decomposed characters, in small blocks (also GPT-2's pattern
with NFC: a letter and the mark after it), and with invalid UTF-8 bytes between decomposed characters.
Compared: ids of the corpus, of a mixed text (scripts, digits, whitespace runs), of text holding the
added and special tokens, of the corpus tokenized in small blocks (the streaming cuts), and of files
with invalid UTF-8 bytes (each valid run as tokenizers encodes it, each bad byte its byte token);
tokenizers' decode of our ids gives the text back; merges written as pairs load the same; shards
made with it train, `eval` reads them, and `sample --vocab` decodes as tokenizers does. A vocabulary over
65536 tokens gets uint32 shards (llm.c's Llama 3 format) that train and eval read. `export --vocab`
copies the tokenizer.json, and transformers' AutoTokenizer reads the folder with the same ids. Malformed and
unsupported files (NFD, NFKC, a Sequence of NFC and more) are refused with one error line naming the file."""
import json
import os
import random
import re
import subprocess
import tempfile
import unicodedata

import ztlib

ztlib.use_pypi_env("tokenizers", "transformers")

import tokenizers  # noqa: E402
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402

check = ztlib.check
tmp = tempfile.mkdtemp(prefix="zt_tokjson_")
check(tokenizers.__version__ == "0.19.1", "tokenizers_is_the_pinned_version", tokenizers.__version__)

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
          r"|\s+(?!\S)|\s+")
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")  # Qwen2's: one digit a piece
with open(os.path.join(ztlib.ROOT, "data", "tinyshakespeare.txt"), encoding="utf-8") as f:
    corpus = f.read()
MIXED = ("Hello world! It's 2024 — naïve café, 東京タワーへ行きました。 Здравствуйте, мир; مرحبا "
         "🎉🚀 \u00a0non-breaking\u3000space\n\n\n   indented\tTAB'd we'll THEY'VE I'm 1234567890 3.14159 x²+y² ½\r\n"
         "end   ")
SPECIAL = ("<|begin_of_text|>ROMEO: hello world, said he<|endoftext|><|end_of_text|>hello worldly "
           "x<|begin_of_text|><|begin_of_text|>  hello world\n<|endoftext")


def train_tokenizer(name, style, nfc=False, texts=()):
    tok = Tokenizer(models.BPE())
    if nfc:
        tok.normalizer = normalizers.NFC()
    if style == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2 if style == "qwen2" else LLAMA3), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1200, show_progress=False,
                                  special_tokens=["<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([corpus, *texts], trainer)
    tok.add_tokens(["hello world"])  # an added token that is not special (normalized: true)
    path = os.path.join(tmp, name + ".json")
    tok.save(path)
    if style == "llama3":  # Llama 3 ships ignore_merges: a piece that is a token stays that token
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
        j["model"]["ignore_merges"] = True
        # the rule that makes " the" goes: BPE alone cannot reach that token now, ignore_merges does
        j["model"]["merges"] = [m for m in j["model"]["merges"] if m.replace(" ", "") != "Ġthe"]
        with open(path, "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False)
        tok = Tokenizer.from_file(path)
        j["model"]["ignore_merges"] = False
        plain = Tokenizer.from_str(json.dumps(j))
        check(tok.encode(corpus).ids != plain.encode(corpus).ids, f"{name}_ignore_merges_matters_here")
    return tok, path


def write(name, data):
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


def zt_tokenize(vocab, name, data, env=None, inputs=None):
    return ztlib.tokenize_ids(vocab, os.path.join(tmp, name), inputs or [write(name + ".txt", data)], env=env)


def first_diff(a, b):
    return ztlib.first_diff(a, b, "tokenizers")


B2U = ztlib.bytes_to_unicode()
U2B = {c: b for b, c in B2U.items()}


def token_bytes(tok, ids):
    """The bytes of IDS by the vocabulary: an added token's text, a model token's byte-alphabet bytes."""
    inv = {v: k for k, v in tok.get_vocab().items()}
    added = {t.content for t in tok.get_added_tokens_decoder().values()}
    return b"".join(inv[i].encode() if inv[i] in added else bytes(U2B[c] for c in inv[i]) for i in ids)


def hf_bytes_ids(tok, data):
    """What zerotrain promises for bytes: each maximal valid UTF-8 run encoded as tokenizers encodes
    it (added tokens split off the raw bytes first), each invalid byte its single-byte token."""
    vocab = tok.get_vocab()
    ids, run = [], b""
    i = 0
    while i < len(data):
        for k in (1, 2, 3, 4):
            try:
                data[i:i + k].decode("utf-8")
                break
            except UnicodeDecodeError:
                k = 0
        if k:
            run += data[i:i + k]
            i += k
            continue
        if run:
            ids += tok.encode(run.decode("utf-8"), add_special_tokens=False).ids
            run = b""
        ids.append(vocab[B2U[data[i]]])
        i += 1
    if run:
        ids += tok.encode(run.decode("utf-8"), add_special_tokens=False).ids
    return ids


env_small_blocks = dict(os.environ, ZEROTRAIN_TOKENIZE_BLOCK="3000")
for style in ("gpt2", "llama3", "qwen2"):
    tok, path = train_tokenizer(style, style)
    enc = lambda text: tok.encode(text, add_special_tokens=False).ids  # noqa: E731
    zt = zt_tokenize(path, style + "_corpus", corpus)
    want = enc(corpus)
    check(zt == want, f"{style}_corpus_ids_equal_tokenizers", first_diff(zt, want))
    check(not isinstance(zt, str) and tok.decode(zt, skip_special_tokens=False) == corpus, f"{style}_tokenizers_decodes_ours")
    zt = zt_tokenize(path, style + "_mixed", MIXED)
    want = enc(MIXED)
    check(zt == want, f"{style}_mixed_text_ids_equal_tokenizers", first_diff(zt, want))
    zt = zt_tokenize(path, style + "_special", SPECIAL)
    want = enc(SPECIAL)
    check(zt == want and tok.token_to_id("<|begin_of_text|>") in zt and tok.token_to_id("hello world") in zt,
          f"{style}_special_and_added_tokens_equal_tokenizers", first_diff(zt, want))
    # the corpus with special tokens strewn in, tokenized in 3000-byte blocks: the cuts are exact
    strewn = "".join(line + ("<|begin_of_text|>" if i % 7 == 0 else "hello world" if i % 11 == 0 else "")
                     for i, line in enumerate(corpus[:200000].split("\n")))
    zt = zt_tokenize(path, style + "_blocks", strewn, env=env_small_blocks)
    want = enc(strewn)
    check(zt == want, f"{style}_small_blocks_ids_equal_tokenizers", first_diff(zt, want))
    # invalid UTF-8 in a file
    raw = b"caf\xc3\xa9 \xff\xfeROMEO\xc3 is  \xed\xa0\x80here<|endoftext|>\x80\n  \xf0\x9f\x8e"
    zt = zt_tokenize(path, style + "_invalid", raw)
    want = hf_bytes_ids(tok, raw)
    check(zt == want, f"{style}_invalid_utf8_ids", first_diff(zt, want))
    back = token_bytes(tok, zt) if not isinstance(zt, str) else b""
    check(back == raw, f"{style}_invalid_utf8_round_trips", repr(back[:60]))
    # two documents are joined with <|endoftext|>
    docs = [write(f"{style}_doc{i}.txt", t) for i, t in enumerate(("First doc.", "Second one."))]
    zt = zt_tokenize(path, style + "_docs", None, inputs=docs)
    want = enc("First doc.") + [tok.token_to_id("<|endoftext|>")] + enc("Second one.")
    check(zt == want, f"{style}_documents_joined_with_endoftext", first_diff(zt, want))

    # merges as [left, right] pairs (newer tokenizers write them so) give the same ids
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    j["model"]["merges"] = [m.split(" ") for m in j["model"]["merges"]]
    pairs = write(style + "_pairs.json", json.dumps(j, ensure_ascii=False))
    zt = zt_tokenize(pairs, style + "_pairs", MIXED)
    check(zt == enc(MIXED), f"{style}_pair_merges_equal", first_diff(zt, enc(MIXED)))

# Qwen2's NFC normalizer: tokenizers splits off the "normalized": false added tokens on the raw text,
# normalizes the rest, matches the "normalized": true ones on that, then pre-tokenizes
DECOMPOSED = ("cafe\u0301 e\u0301 A\u030a \u1100\u1161\u11a8 \u1100\u1161 \u1112\u1161\u11ab\u1100\u1173\u11af "
              "q\u0307\u0323 x\u0323\u0307 \u212b \u0958\n\u0958 o\u0308\u0304 already: café Å 각 한글 naïve ")
NFC_TRAIN = [DECOMPOSED * 20, unicodedata.normalize("NFC", DECOMPOSED) * 40, "\u0958\n" * 3000]
nfc_tok, nfc_path = train_tokenizer("qwen2_nfc", "qwen2", nfc=True, texts=NFC_TRAIN)
nfc_tok.add_tokens([AddedToken("e\u0301x", normalized=False), AddedToken("café", normalized=True)])
nfc_tok.save(nfc_path)
nfc_tok = Tokenizer.from_file(nfc_path)
with open(nfc_path, encoding="utf-8") as f:
    nfc_json = json.load(f)
check(nfc_json["normalizer"] == {"type": "NFC"}, "nfc_tokenizer_json_has_qwen2s_normalizer", repr(nfc_json["normalizer"]))
plain_json = dict(nfc_json, normalizer=None)
plain_tok = Tokenizer.from_str(json.dumps(plain_json))
enc = lambda text: nfc_tok.encode(text, add_special_tokens=False).ids  # noqa: E731
check(unicodedata.normalize("NFC", DECOMPOSED) != DECOMPOSED and enc(DECOMPOSED) != plain_tok.encode(DECOMPOSED).ids,
      "nfc_normalization_matters_here")
NFC_ADDED = ("cafe\u0301 e\u0301x e\u0301\u0301x éx caf<|endoftext|>e\u0301 cafe<|endoftext|>\u0301 "
             "<|begin_of_text|>A\u030a\u1100<|end_of_text|>\u1161 hello world\u0301 cafe\u0301x\n")
# characters NFC changes or joins (marks of several classes, jamo, a compatibility ideograph, Greek
# with its tonos, a composition exclusion) among ones it leaves, in a fixed random order
POOL = ("a e o A q x \n\u0301\u0308\u0304\u0323\u0307\u0327\u030a\u093c\u1100\u1161\u11a8\u1112\u11ab\uac00\uac01"
        "\uf900\u03ac\u03b1\u0958\u0915\u212b\u2000\u0b47\u0b3e\u0dd9\u0dcf\u4e00\u00e9ab").split(" ")
POOL = [c for w in POOL for c in (w if len(w) > 1 else [w])] + [" "] * 6
rng = random.Random(7)
RANDOM_MIX = "".join(rng.choice(POOL) for _ in range(30000))
nfc_cases = [("corpus", corpus), ("decomposed", DECOMPOSED), ("composed", unicodedata.normalize("NFC", DECOMPOSED)),
             ("mixed", MIXED), ("added", NFC_ADDED), ("random_mix", RANDOM_MIX)]
for name, text in nfc_cases:
    zt = zt_tokenize(nfc_path, "nfc_" + name, text)
    want = enc(text)
    check(zt == want, f"nfc_{name}_ids_equal_tokenizers", first_diff(zt, want))
check(nfc_tok.token_to_id("café") in enc(NFC_ADDED) and nfc_tok.token_to_id("e\u0301x") in enc(NFC_ADDED),
      "nfc_added_tokens_both_kinds_matched")
# small blocks: cuts before White_Space hold on the normalized text (U+0958 before a newline becomes a mark)
strewn = "".join(line + ("\u0958" if i % 3 == 0 else " cafe\u0301" if i % 5 == 0 else "<|end_of_text|>" if i % 7 == 0
                         else "e\u0301x" if i % 11 == 0 else "") + "\n" for i, line in enumerate(corpus[:200000].split("\n")))
zt = zt_tokenize(nfc_path, "nfc_blocks", strewn, env=env_small_blocks)
want = enc(strewn)
check(zt == want, "nfc_small_blocks_ids_equal_tokenizers", first_diff(zt, want))
# every letter before White_Space is U+0958, whose NFC ends with a mark that joins the newline's piece
check(enc("\u0958\n") != enc("\u0958") + enc("\n"), "nfc_mark_and_newline_are_one_piece_here")
words = "".join(w + "\u0958\n" for w in corpus[:60000].split())
zt = zt_tokenize(nfc_path, "nfc_blocks_qa", words, env=env_small_blocks)
want = enc(words)
check(zt == want, "nfc_small_blocks_before_a_composition_exclusion", first_diff(zt, want))
# GPT-2's pattern with NFC: a letter and a mark after it are of two classes, but one character
gpt2_nfc, gpt2_nfc_path = train_tokenizer("gpt2_nfc", "gpt2", nfc=True, texts=NFC_TRAIN)
marks = "".join(w + ("e\u0301" if i % 2 else "A\u030a") + (" " if i % 40 == 0 else "")
                for i, w in enumerate(corpus[:60000].split()))
zt = zt_tokenize(gpt2_nfc_path, "gpt2_nfc_blocks", marks, env=env_small_blocks)
want = gpt2_nfc.encode(marks, add_special_tokens=False).ids
check(zt == want, "nfc_gpt2_pattern_small_blocks_letter_then_mark", first_diff(zt, want))
raw = ("e".encode() + b"\xff" + "\u0301A\u030a".encode() + b"\xcc" + "\u0301\u1100\u1161".encode() + b"\x80\xc3"
       + "\u11a8 cafe\u0301\u0301 e\u0301x".encode() + b"\xed\xa0\x80" + "q\u0307\u0323".encode() + b"\xe1\x84")
zt = zt_tokenize(nfc_path, "nfc_invalid", raw)
want = hf_bytes_ids(nfc_tok, raw)
check(zt == want, "nfc_invalid_utf8_between_decomposed_ids", first_diff(zt, want))
seq = write("nfc_sequence.json", json.dumps(dict(nfc_json, normalizer={"type": "Sequence", "normalizers": [{"type": "NFC"}]}),
                                            ensure_ascii=False))
zt = zt_tokenize(seq, "nfc_sequence", NFC_ADDED)
want = Tokenizer.from_file(seq).encode(NFC_ADDED, add_special_tokens=False).ids
check(zt == want and want == enc(NFC_ADDED), "nfc_sequence_of_nfc_equals_tokenizers", first_diff(zt, want))
# decoding is not normalized: the ids of decomposed text are the bytes of its NFC
zt = zt_tokenize(nfc_path, "nfc_decoded", DECOMPOSED)
back = token_bytes(nfc_tok, zt) if not isinstance(zt, str) else b""
check(back == unicodedata.normalize("NFC", DECOMPOSED).encode(), "nfc_ids_decode_to_the_nfc_text", repr(back[:60]))

# shards made with a tokenizer.json train; eval reads them; sample decodes with --vocab
tok, path = train_tokenizer("train", "llama3")
V = tok.get_vocab_size()
p = ztlib.run(["tokenize", "--vocab", path, os.path.join(ztlib.ROOT, "data", "tinyshakespeare.txt"), "-o",
               os.path.join(tmp, "shk")])
check(p.returncode == 0, "tokenize_with_tokenizer_json_writes_shards", p.stderr[-400:])
ck = os.path.join(tmp, "ck")
p, rows = ztlib.train(os.path.join(ztlib.ROOT, "configs", "tiny.yaml"),
                      [f"model.vocab_size={V}", f"data.train={tmp}/shk_train_*.bin", f"data.val={tmp}/shk_val.bin",
                       "train_iters=10", f"checkpoint.dir={ck}"])
losses = ztlib.losses(rows)
check(p.returncode == 0 and len(losses) >= 2 and losses[-1] < losses[0], "shards_train_loss_falls",
      f"rc {p.returncode} losses {losses}\n" + p.stderr[-600:])
step = os.path.join(ck, "step_00000010")
e = ztlib.run(["eval", step, "--data", os.path.join(tmp, "shk_val.bin"), "--batches", "2"])
check(e.returncode == 0 and "val_loss:" in e.stdout, "eval_reads_the_shards", e.stdout[-300:] + e.stderr[-400:])
args = ["sample", step, "--vocab", path, "--prompt", "ROMEO:", "--max-tokens", "30", "--seed", "5"]
ids = ztlib.run(args + ["--print-ids"])
txt = subprocess.run([ztlib.BIN] + args, cwd=ztlib.ROOT, env=ztlib.ENV, capture_output=True, timeout=300)  # bytes
got = [int(x) for x in ids.stdout.split()] if ids.returncode == 0 else []
want = token_bytes(tok, got)
check(len(got) == 30 and txt.returncode == 0 and txt.stdout == b"ROMEO:" + want + b"\n", "sample_decodes_the_ids",
      ids.stderr[-300:] + repr(txt.stdout[-200:]) + repr(txt.stderr[-300:]))
check(tok.decode(got, skip_special_tokens=False) == want.decode("utf-8", "replace"), "sample_text_is_tokenizers_decode",
      repr(want[:80]))

# export copies the tokenizer.json: AutoTokenizer reads the folder as a fast tokenizer with the same ids
exp = os.path.join(tmp, "export")
p = ztlib.run(["export", ck, "-o", exp, "--vocab", path])
try:
    import transformers
    transformers.logging.set_verbosity_error()
    fast = transformers.AutoTokenizer.from_pretrained(exp)
    same = fast(MIXED, add_special_tokens=False)["input_ids"] == tok.encode(MIXED, add_special_tokens=False).ids
except Exception as e:  # noqa: BLE001 (the check below says what failed)
    fast, same = repr(e), False
check(p.returncode == 0 and os.path.exists(os.path.join(exp, "tokenizer.json")) and same,
      "export_writes_tokenizer_json_auto_tokenizer_reads", f"{fast} {p.stderr[-400:]}")

# malformed and unsupported files: one error line naming the file
with open(path, encoding="utf-8") as f:
    good = json.load(f)
text_in = write("in.txt", "hello there")


def variant(edit):
    j = json.loads(json.dumps(good))
    edit(j)
    return json.dumps(j, ensure_ascii=False)


def drop(keys):
    def edit(j):
        d = j
        for k in keys[:-1]:
            d = d[k]
        del d[keys[-1]]
    return edit


def setp(keys, value):
    def edit(j):
        d = j
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value
    return edit


raw_good = json.dumps(good, ensure_ascii=False)
cases = [
    ("truncated", raw_good[:len(raw_good) // 2], r"\d+:\d+: "),
    ("missing_vocab", variant(drop(["model", "vocab"])), "model.vocab"),
    ("missing_merges", variant(drop(["model", "merges"])), "model.merges"),
    ("missing_model", variant(drop(["model"])), '"model"'),
    ("bad_merge_token", variant(lambda j: j["model"]["merges"].insert(3, "Zq9 xx")), r"model.merges\[3\]: token"),
    ("bad_merge_form", variant(lambda j: j["model"]["merges"].insert(0, "abc")), r"model.merges\[0\]: expected"),
    ("normalizer_nfd", variant(setp(["normalizer"], {"type": "NFD"})), "unsupported normalizer NFD"),
    ("normalizer_nfkc", variant(setp(["normalizer"], {"type": "NFKC"})), "unsupported normalizer NFKC"),
    ("normalizer_lowercase", variant(setp(["normalizer"], {"type": "Lowercase"})), "unsupported normalizer Lowercase"),
    ("normalizer_sequence", variant(setp(["normalizer"], {"type": "Sequence", "normalizers": [{"type": "NFC"},
                                                                                              {"type": "Lowercase"}]})),
     r"unsupported normalizer Sequence \(supported: \[NFC\]\)"),
    ("normalized_token_not_nfc", variant(lambda j: (j.update(normalizer={"type": "NFC"}),
                                                   j["added_tokens"][-1].update(content="e\u0301!"))),
     "not NFC"),
    ("metaspace", variant(setp(["pre_tokenizer"], {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always",
                                                   "split": True})), "unsupported pre_tokenizer Metaspace"),
    ("byte_fallback", variant(setp(["model", "byte_fallback"], True)), "byte_fallback"),
    ("unigram", variant(setp(["model", "type"], "Unigram")), "unsupported model type Unigram"),
    ("lstrip", variant(lambda j: j["added_tokens"][0].update(lstrip=True)), "lstrip"),
    ("decoder_metaspace", variant(setp(["decoder"], {"type": "Metaspace"})), "unsupported decoder Metaspace"),
    ("missing_byte", variant(lambda j: j["model"]["vocab"].update({"ĀĀĀĀĀĀ": j["model"]["vocab"].pop("Ā")})),
     "no token for the byte 0x00"),
    ("huge_id", variant(lambda j: j["model"]["vocab"].update({"ĀĀĀĀĀĀ": 3_000_000_000})),
     r"model.vocab: expected a token id \(an integer 0..16777215\)"),
    ("added_id_renumbered", variant(lambda j: j["added_tokens"][-1].update(id=5000)),
     r"added_tokens\[3\]: id 5000, but tokenizers numbers this token 1200"),
]
for name, text, want in cases:
    bad = write(name + ".json", text)
    p = ztlib.run(["tokenize", "--vocab", bad, text_in, "-o", os.path.join(tmp, "bad_" + name)])
    lines = [line for line in p.stderr.splitlines() if "error" in line]
    check(p.returncode != 0 and len(lines) == 1 and bad in lines[0] and re.search(want, lines[0]),
          f"refuses_{name}", p.stderr[-400:])
    check(not os.path.exists(os.path.join(tmp, f"bad_{name}_val.bin")), f"refuses_{name}_writes_nothing")

# a vocabulary beyond uint16 shards (Llama 3's 128256 tokens): uint32 shards, llm.c's Llama 3 format,
# that train and eval read
def far_token(j):  # tokenizers takes an added token's id from model.vocab (else it numbers it on from the vocabulary)
    j["model"]["vocab"]["<|far|>"] = 70000
    j["added_tokens"] = [a for a in j["added_tokens"] if a["content"] != "hello world"]  # it would be 1201 now
    j["added_tokens"].append({"id": 70000, "content": "<|far|>", "single_word": False, "lstrip": False, "rstrip": False,
                              "normalized": False, "special": True})


big = variant(far_token)
bigp = write("big.json", big)
big_tok = Tokenizer.from_file(bigp)
big_text = corpus[:20000].replace("\n\n", "\n<|far|>\n")
zt = zt_tokenize(bigp, "big", big_text)
want = big_tok.encode(big_text, add_special_tokens=False).ids
check(zt == want and 70000 in zt, "uint32_shard_ids_equal_tokenizers", first_diff(zt, want))
with open(os.path.join(tmp, "big_train_000000.bin"), "rb") as f:
    head = f.read(8)
check(head[:4] == (20240801).to_bytes(4, "little") and head[4:8] == (7).to_bytes(4, "little"),
      "uint32_shard_has_llmc_llama3_header", repr(head))
p = ztlib.run(["tokenize", "--vocab", bigp, write("big_all.txt", big_text * 3), "-o", os.path.join(tmp, "bigs")])
check(p.returncode == 0 and ztlib.read_shard(os.path.join(tmp, "bigs_val.bin")).tolist()
      + ztlib.read_shard(os.path.join(tmp, "bigs_train_000000.bin")).tolist()
      == big_tok.encode(big_text * 3, add_special_tokens=False).ids, "uint32_val_split_equals_tokenizers", p.stderr[-300:])
ck32 = os.path.join(tmp, "ck32")
p, rows = ztlib.train(os.path.join(ztlib.ROOT, "configs", "tiny.yaml"),
                      ["model.vocab_size=70001", f"data.train={tmp}/bigs_train_*.bin", f"data.val={tmp}/bigs_val.bin",
                       "train_iters=4", f"checkpoint.dir={ck32}"])
check(p.returncode == 0 and len(rows) >= 1, "uint32_shards_train", f"rc {p.returncode}\n" + p.stderr[-600:])
e = ztlib.run(["eval", os.path.join(ck32, "step_00000004"), "--data", os.path.join(tmp, "bigs_val.bin"), "--batches", "2"])
check(e.returncode == 0 and "val_loss:" in e.stdout, "uint32_shards_eval", e.stdout[-300:] + e.stderr[-400:])
p, _ = ztlib.train(os.path.join(ztlib.ROOT, "configs", "tiny.yaml"),
                   [f"model.vocab_size={V}", f"data.train={tmp}/bigs_train_*.bin", "data.val=", "train_iters=2"])
check(p.returncode != 0 and "70000" in p.stderr and "vocab_size" in p.stderr, "uint32_token_beyond_model_vocab_refused",
      p.stderr[-400:])
s = ztlib.run(["sample", step, "--vocab", bigp, "--prompt", "<|far|>", "--max-tokens", "4"])
check(s.returncode != 0 and "70000" in s.stderr and f"vocab_size {V}" in s.stderr and s.stderr.count("error") == 1,
      "sample_refuses_prompt_token_beyond_model_vocab", s.stderr[-300:])
s = ztlib.run(["sample", step, "--vocab", write("nfd.json", variant(setp(["normalizer"], {"type": "NFD"}))), "--prompt", "x"])
check(s.returncode != 0 and "nfd.json" in s.stderr and "normalizer NFD" in s.stderr and s.stderr.count("error") == 1,
      "sample_refuses_unsupported_tokenizer_json", s.stderr[-300:])
ztlib.finish()
