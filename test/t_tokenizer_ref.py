#!/usr/bin/env python3
"""t_tokenizer_ref.py — an independent GPT-2 BPE reference (OpenAI's encoder.py algorithm: the
`regex` module with GPT-2's pattern as written, bytes_to_unicode, merges by rank), compared with
the C tokenizer (build/test/test_tokenizer --encode-records) on random strings drawn from many
scripts, whitespace, punctuation, digits and emoji, on random bytes (invalid UTF-8, with the
documented byte fallback of src/io/tokenizer.h), and on data/tinyshakespeare.txt.

Prints "PASS name" / "FAIL name: why" lines. Needs python3-regex.
Usage: t_tokenizer_ref.py [--ids LITERAL...]   (--ids prints the reference ids of each Python str
or bytes literal, e.g. "b'\\xff'" — used to get the expected ids for test_tokenizer.c)
"""
import ast
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import unicodedata

import ztlib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
VOCAB = os.path.join(ROOT, "data", "gpt2")
BIN = os.path.join(ROOT, "build", "test", "test_tokenizer")

try:
    import regex
except ImportError:
    print("FAIL t_tokenizer_ref: the Python module `regex` is missing (Debian: python3-regex)")
    sys.exit(1)


bytes_to_unicode = ztlib.bytes_to_unicode


class Encoder:
    PAT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

    def __init__(self, vocab_dir):
        with open(os.path.join(vocab_dir, "encoder.json"), encoding="utf-8") as f:
            self.encoder = json.load(f)
        with open(os.path.join(vocab_dir, "vocab.bpe"), encoding="utf-8") as f:
            lines = f.read().split("\n")
        merges = [tuple(l.split()) for l in lines[1:] if l]
        self.ranks = {m: i for i, m in enumerate(merges)}
        self.byte_encoder = bytes_to_unicode()
        self.pat = regex.compile(self.PAT)
        self.cache = {}

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = list(token)
        while len(word) > 1:
            pairs = set(zip(word, word[1:]))
            best = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if best not in self.ranks:
                break
            a, b = best
            new = []
            i = 0
            while i < len(word):
                if i < len(word) - 1 and word[i] == a and word[i + 1] == b:
                    new.append(a + b)
                    i += 2
                else:
                    new.append(word[i])
                    i += 1
            word = new
        ids = [self.encoder[w] for w in word]
        self.cache[token] = ids
        return ids

    def encode_text(self, text):
        out = []
        for piece in regex.findall(self.pat, text):
            out += self.bpe("".join(self.byte_encoder[b] for b in piece.encode("utf-8")))
        return out

    def encode_bytes(self, data):
        """encoder.py on each maximal valid UTF-8 run; each invalid byte is its own piece."""
        s = data.decode("utf-8", errors="surrogateescape")
        out, run = [], []
        for ch in s:
            if 0xDC80 <= ord(ch) <= 0xDCFF:
                out += self.encode_text("".join(run))
                run = []
                out.append(self.encoder[self.byte_encoder[ord(ch) - 0xDC00]])
            else:
                run.append(ch)
        return out + self.encode_text("".join(run))


def c_encode(records):
    """ids from the C tokenizer for each bytes record, via one test_tokenizer process."""
    with tempfile.NamedTemporaryFile(delete=False) as f:
        for r in records:
            f.write(struct.pack("<Q", len(r)))
            f.write(r)
        path = f.name
    try:
        p = subprocess.run([BIN, "--encode-records", path, VOCAB], capture_output=True, timeout=120)
    finally:
        os.unlink(path)
    if p.returncode != 0:
        raise RuntimeError("test_tokenizer --encode-records failed: " + p.stderr.decode(errors="replace")[-500:])
    lines = p.stdout.decode().split("\n")
    return [[int(x) for x in lines[i].split()] for i in range(len(records))]


def pools():
    """Character pools: code points assigned in this Python's Unicode (PCRE2 10.42 and Python 3.11
    both use Unicode 14.0; later additions may be classified differently by a newer `regex`)."""
    def rng(a, b):
        return [chr(c) for c in range(a, b + 1) if unicodedata.category(chr(c)) not in ("Cn", "Cs")]

    ws = [chr(c) for c in (0x9, 0xA, 0xB, 0xC, 0xD, 0x20, 0x85, 0xA0, 0x1680, 0x2000, 0x2005, 0x200A, 0x2028,
                           0x2029, 0x202F, 0x205F, 0x3000, 0x1C, 0x1D, 0x1E, 0x1F, 0x180E, 0x200B, 0xFEFF)]
    return {
        "ascii_letters": [chr(c) for c in range(ord("a"), ord("z") + 1)] + [chr(c) for c in range(ord("A"), ord("Z") + 1)],
        "ascii_digits": list("0123456789"),
        "ascii_punct": list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
        "space": [" "] * 6 + ["\n"] * 3 + ["\t", "\r\n", "  ", "\n\n"],
        "unicode_ws": ws,
        "contraction": ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "n't", "’s"],
        "latin1": rng(0xA0, 0x24F),
        "greek_cyrillic": rng(0x370, 0x52F),
        "hebrew_arabic": rng(0x590, 0x6FF),
        "indic": rng(0x900, 0xDFF),
        "thai_etc": rng(0xE00, 0xFFF),
        "cjk": rng(0x4E00, 0x4FFF) + rng(0x3040, 0x30FF) + rng(0xAC00, 0xAD00),
        "combining": rng(0x300, 0x36F) + rng(0x1AB0, 0x1AFF) + rng(0x20D0, 0x20FF),
        "emoji": rng(0x1F300, 0x1F64F) + rng(0x1F900, 0x1F9FF) + ["\u200d", "\ufe0f", "\U0001F3FB", "\u20e3"],
        "other_digits": rng(0x660, 0x669) + rng(0x6F0, 0x6F9) + rng(0x966, 0x96F) + rng(0xFF10, 0xFF19) +
                        rng(0x2150, 0x218B) + rng(0x2460, 0x249B) + rng(0x1D7CE, 0x1D7FF),
        "symbols": rng(0x2000, 0x2BFF) + rng(0xFF00, 0xFFEF),
        "gpt2_alphabet": ["Ġ", "Ċ", "ĉ", "Ā", "ł", "Ń"],
        "any_bmp": rng(0x80, 0xFFFD),
        "astral": rng(0x10000, 0x10FFFF)[::97],
        "specialish": ["<|endoftext|>", "<|", "|>", "\x00", "\x7f", "\x1b[0m"],
    }


def random_text(rnd, P, names):
    n = rnd.randint(0, 40)
    out = []
    for _ in range(n):
        pool = P[rnd.choice(names)]
        k = rnd.choice([1, 1, 1, 2, 3, 5, 8])
        out.append("".join(rnd.choice(pool) for _ in range(k)))
    return "".join(out)


def check(ok, name, why=""):
    print(("PASS " + name) if ok else ("FAIL %s: %s" % (name, why)))
    sys.stdout.flush()
    return ok


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def compare(name, enc, records, expected=None):
    expected = expected or [enc.encode_bytes(r) for r in records]
    got = c_encode(records)
    bad = [i for i in range(len(records)) if got[i] != expected[i]]
    if bad:
        i = bad[0]
        d = first_diff(got[i], expected[i])
        return check(False, name, "%d of %d differ; first: input %r: C %s != reference %s (from position %d)" % (
            len(bad), len(records), records[i][:200], got[i][max(0, d - 3):d + 6], expected[i][max(0, d - 3):d + 6], d))
    return check(True, name)


def main():
    enc = Encoder(VOCAB)
    if len(sys.argv) > 1 and sys.argv[1] == "--ids":
        for t in sys.argv[2:]:
            v = ast.literal_eval(t)
            b = v if isinstance(v, bytes) else v.encode("utf-8")
            print(repr(t), enc.encode_bytes(b))
        return 0
    if not os.access(BIN, os.X_OK):
        check(False, "t_tokenizer_ref", "%s is not built (make)" % BIN)
        return 1
    rnd = random.Random(20240520)
    P = pools()
    names = sorted(P)
    ok = True

    # pools one at a time with spaces, then everything mixed
    for name in names:
        recs = [random_text(rnd, P, [name, "space", name]).encode("utf-8") for _ in range(60)]
        ok &= compare("ref_pool_" + name, enc, recs)
    recs = [random_text(rnd, P, names).encode("utf-8") for _ in range(3000)]
    ok &= compare("ref_mixed_3000_strings", enc, recs)

    # long pieces (the C side merges pieces over 48 bytes with a heap instead of a linear scan)
    long_recs = []
    for _ in range(40):
        pool = P[rnd.choice(["ascii_letters", "ascii_digits", "ascii_punct", "latin1", "cjk", "emoji", "unicode_ws"])]
        long_recs.append("".join(rnd.choice(pool) for _ in range(rnd.randint(40, 400))).encode("utf-8"))
    long_recs += [b"a" * 1000, b"=" * 777, b" " * 500 + b"x", b"\n" * 300, "ab".join("Ġ" * 60).encode(),
                  bytes(rnd.choice(b"0123456789abcdef") for _ in range(600))]
    ok &= compare("ref_long_pieces", enc, long_recs)

    # random bytes: invalid UTF-8, truncated sequences, surrogates, overlongs
    frag = [b"\xff", b"\xfe", b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe4\xb8", b"\xe4", b"\x80",
            b"\xf0\x9f\x98", "中".encode(), "é".encode(), b"a", b" ", b"\n", b"'s", b"1"]
    byte_recs = []
    for _ in range(400):
        if rnd.random() < 0.5:
            byte_recs.append(bytes(rnd.randrange(256) for _ in range(rnd.randint(0, 60))))
        else:
            byte_recs.append(b"".join(rnd.choice(frag) for _ in range(rnd.randint(0, 30))))
    ok &= compare("ref_invalid_utf8_bytes", enc, byte_recs)

    # the corpus
    with open(os.path.join(ROOT, "data", "tinyshakespeare.txt"), "rb") as f:
        corpus = f.read()
    ref = enc.encode_bytes(corpus)
    ok &= check(len(ref) == 338025 and ref[:4] == [5962, 22307, 25, 198], "ref_corpus_reference_itself",
                "reference gives %d tokens starting %s" % (len(ref), ref[:4]))
    ok &= compare("ref_corpus_tinyshakespeare", enc, [corpus], [ref])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
