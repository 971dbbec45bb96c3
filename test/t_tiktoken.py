"""t_tiktoken.py — `zerotrain tokenize` against OpenAI's tiktoken (from PyPI, pinned by
scripts/install-deps.sh). tiktoken normally downloads its gpt2 BPE file; there is no network, so
the encoding is built here from data/gpt2 (encoder.json gives each token's bytes and its rank,
which for GPT-2 is its id; tiktoken's own gpt2 loader checks that these files are the ones it
uses, by the sha256 sums in data/gpt2/README.md). Compared: the ids of tiny Shakespeare, of a
mixed text (many scripts, emoji, whitespace runs, contractions, digits) and of random strings
drawn from those; and tiktoken's decode of zerotrain's ids gives back the text."""
import os
import random
import tempfile

import ztlib

ztlib.use_pypi_env("tiktoken")

check = ztlib.check
VOCAB = os.path.join(ztlib.ROOT, "data", "gpt2")
tmp = tempfile.mkdtemp(prefix="zt_tiktoken_")


enc = ztlib.tiktoken_gpt2()


def zt_tokenize(name, text):
    path = os.path.join(tmp, name + ".txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return ztlib.tokenize_ids(VOCAB, os.path.join(tmp, name), [path])


def first_diff(a, b):
    return ztlib.first_diff(a, b, "tiktoken")


with open(os.path.join(ztlib.ROOT, "data", "tinyshakespeare.txt"), encoding="utf-8") as f:
    corpus = f.read()
zt = zt_tokenize("shakespeare", corpus)
tk = enc.encode_ordinary(corpus)
check(zt == tk, "tinyshakespeare_ids_equal_tiktoken", first_diff(zt, tk))

mixed = ("Hello world! It's 2024 — naïve café, 東京タワーへ行きました。 Здравствуйте, мир; مرحبا بالعالم "
         "नमस्ते दुनिया 🎉🚀👩‍👩‍👧 \u00a0non-breaking\u3000ideographic space\n\n\n   indented\tTAB'd "
         "we'll they've I'm you're she'd it's DON'T 1234567890 3.14159 x²+y² ½ Ⅻ\r\n\u2028end   ")
zt = zt_tokenize("mixed", mixed)
tk = enc.encode_ordinary(mixed)
check(zt == tk, "mixed_text_ids_equal_tiktoken", first_diff(zt, tk))
check(not isinstance(zt, str) and enc.decode(zt) == mixed, "tiktoken_decodes_zerotrain_ids", repr(mixed[:40]))

rng = random.Random(16)
alphabet = list(mixed) + [" ", " ", "  ", "\n", "'s", "'ll", "\t", "0", "7", "é", "ß", "ﬁ", "Ω", "\u200b", "🙂"]
texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60))) for _ in range(200)]
paths = []  # one tokenize run over all of them: each file is a document, joined by <|endoftext|>
for i, t in enumerate(texts):
    path = os.path.join(tmp, f"r{i}.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(t)
    paths.append(path)
p = ztlib.run(["tokenize", "--vocab", VOCAB] + paths + ["-o", os.path.join(tmp, "random"), "--val-fraction", "0"])
zt = ztlib.read_shard(os.path.join(tmp, "random_train_000000.bin")).tolist() if p.returncode == 0 else p.stderr[-300:]
tk = []
for i, t in enumerate(texts):
    if i:
        tk.append(50256)  # tokenize joins documents with <|endoftext|>
    tk += enc.encode_ordinary(t)
check(zt == tk, "random_mixed_strings_equal_tiktoken", first_diff(zt, tk))
ztlib.finish()
