"""t_readme_commands.py — the guides' command lines run as written: every indented command of the
Usage (docs/getting-started.md), Checkpoints (docs/checkpoints.md) and Tensor parallelism sections (`./zerotrain ...`, `python3 -c ...`), read from README.md
itself, with its own config and every default it has (the demo config samples at the end, evals,
logs metrics), shortened only by `--set train_iters=3` on `train` and `run`. The test configs turn
features off for speed (tiny.yaml: sample_tokens 0), so a feature only the defaults use — the
sample after a tensor-parallel run, say — is exercised here at least once.

The commands run in a scratch folder laid out as the repository is (configs/, data/gpt2, ./zerotrain
as links), where the README's placeholders exist: mytext.txt (the start of tiny Shakespeare), the
demo's tokenized corpus, and checkpoints/run1 ("a run's checkpoint.dir": the README's own train
command, run once more with that checkpoint.dir)."""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ztlib  # noqa: E402

# (file, section): the guides' sections whose commands this runs (they were the README's Usage and
# Tensor parallelism sections before the README became a front page, issue 49)
SECTIONS = (("docs/getting-started.md", "## Usage"), ("docs/checkpoints.md", "## Checkpoints, Hugging Face models, sample and eval"),
            ("docs/tensor-parallelism.md", "## Tensor parallelism"))


def readme_commands():
    """(section, command) for each indented command line of SECTIONS, continuation lines joined and
    trailing comments dropped"""
    out = []
    for path, title in SECTIONS:
        text = open(os.path.join(ztlib.ROOT, path)).read()
        start = text.index("\n" + title + "\n")
        end = text.find("\n## ", start + 1)
        body = text[start:end if end > 0 else len(text)].split("\n")
        i = 0
        while i < len(body):
            line = body[i]
            if re.match(r"^    (\./zerotrain|python3) ", line):
                cmd = line[4:]
                while cmd.rstrip().endswith("\\") and i + 1 < len(body):
                    i += 1
                    cmd = cmd.rstrip()[:-1] + " " + body[i].strip()
                # a trailing "# ..." comment (outside quotes: shlex knows)
                lex = shlex.shlex(cmd, posix=True, punctuation_chars=False)
                lex.whitespace_split = True
                lex.commenters = "#"
                words = list(lex)
                out.append((title, words))
            i += 1
    return out


def shortened(words):
    """train and run get --set train_iters=3, nothing else changes"""
    if len(words) > 1 and words[0] == "./zerotrain" and words[1] in ("train", "run"):
        return words + ["--set", "train_iters=3"]
    return words


def scratch():
    d = tempfile.mkdtemp(prefix="zt_readme_")
    for name in ("configs", "zerotrain", "libzerotrain-cuda.so"):
        if os.path.exists(os.path.join(ztlib.ROOT, name)):
            os.symlink(os.path.join(ztlib.ROOT, name), os.path.join(d, name))
    os.makedirs(os.path.join(d, "data"))
    os.symlink(os.path.join(ztlib.ROOT, "data/gpt2"), os.path.join(d, "data/gpt2"))
    with open(os.path.join(ztlib.ROOT, "data/tinyshakespeare.txt")) as f:
        text = f.read()
    with open(os.path.join(d, "mytext.txt"), "w") as f:
        f.write(text[:200000])
    # the demo's corpus, as `make demo` tokenizes it (configs/demo.yaml reads data/tinyshakespeare_*)
    subprocess.run(["./zerotrain", "tokenize", "--vocab", "data/gpt2", os.path.join(ztlib.ROOT, "data/tinyshakespeare.txt"),
                    "-o", "data/tinyshakespeare"], cwd=d, env=ztlib.ENV, check=True, capture_output=True)
    return d


def main():
    ztlib.use_pypi_env("transformers")
    cmds = readme_commands()
    names = [" ".join(w[:2]) for _, w in cmds]
    # the README must still hold the commands this test was written for
    for want in ("./zerotrain tokenize", "./zerotrain train", "./zerotrain run", "./zerotrain export", "python3 -c"):
        ztlib.check(want in names, f"readme_has_{want.split()[-1]}", f"no '{want}' line in {SECTIONS}: {names}")
    ztlib.check(any(t == "## Tensor parallelism" or "--tp" in w for t, w in cmds), "readme_tp_section_has_run",
                "no tensor-parallel command")
    d = scratch()
    try:
        env = dict(ztlib.ENV)
        py = sys.executable  # the PyPI environment's (main() re-ran this script there: transformers)
        for title, words in cmds:
            if words[:2] == ["./zerotrain", "export"]:
                # checkpoints/run1 is "a run's checkpoint.dir": the README's train command makes one
                train = next(w for _, w in cmds if w[:2] == ["./zerotrain", "train"])
                r = subprocess.run(shortened(train) + ["--set", "checkpoint.dir=checkpoints/run1"], cwd=d, env=env,
                                   capture_output=True, encoding="utf-8", errors="replace", timeout=600)
                ztlib.check(r.returncode == 0, "readme_checkpoint_for_export", r.stderr[-400:])
            argv = shortened(words)
            if argv[0] == "python3":
                argv = [py] + argv[1:]
            r = subprocess.run(argv, cwd=d, env=env, capture_output=True, encoding="utf-8", errors="replace", timeout=600)
            name = "readme_" + re.sub(r"[^a-z0-9]+", "_", " ".join(words[1:4]).lower()).strip("_")[:60]
            ztlib.check(r.returncode == 0, name,
                        f"`{' '.join(argv)}` exited {r.returncode}: {(r.stderr or r.stdout)[-600:]}")
            if "--tp" in words and r.returncode == 0:
                # the demo config samples at its end: every rank got there (exit 0), and the text came out
                ztlib.check("sample" in r.stdout.lower(), "readme_tp_run_samples", r.stdout[-400:])
    finally:
        shutil.rmtree(d, ignore_errors=True)
    ztlib.finish()


if __name__ == "__main__":
    main()
