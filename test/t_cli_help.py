"""t_cli_help.py — every command's help comes from one table (src/cmd/help.c), and it says all:
each command of main.c's table answers `help CMD`, `CMD --help` and `CMD -h` with the same text,
status 0, before MPI starts (a broken MPI component would stop MPI_Init); every option the command's
parser compares against appears in its help; an unknown option gets the one wording with the nearest
option; docs/cli.md is `zerotrain help --format md` as it stands (a new option cannot land undocumented),
and docs/configuration.md's key table is `zerotrain config --keys --format md` (nor can a new key)."""
import os
import re

import ztlib

src = os.path.join(ztlib.ROOT, "src", "cmd")
main_c = ztlib.read_text(os.path.join(src, "main.c"))
commands = re.findall(r'\{"([a-z]+)", zt_cmd_([a-z]+),', main_c)
ztlib.check(len(commands) >= 13, "command_table_read", f"{commands}")
no_mpi = {"OMPI_MCA_btl": "no_such_component", "ZEROTRAIN_CUDA_BACKEND": "/nonexistent.so"}

# the parser of each command: the body of zt_cmd_NAME in the file that defines it
bodies = {}
for f in os.listdir(src):
    if f.endswith(".c"):
        text = ztlib.read_text(os.path.join(src, f))
        for m in re.finditer(r"\nint zt_cmd_([a-z]+)\(int argc, char \*\*argv\) \{\n(.*?)\n\}\n", text, re.S):
            bodies[m.group(1)] = m.group(2)
# train and run parse in helpers of their own
for name, fn, f in (("train", "setup", "train.c"), ("run", "parse_args", "run.c"), ("tokenize", None, "tokenize.c")):
    text = ztlib.read_text(os.path.join(src, f))
    m = re.search(r"\nstatic int %s\(.*?\n\}\n" % fn, text, re.S) if fn else None
    bodies[name] = m.group(0) if m else text

for name, fn in commands:
    outs = [ztlib.run(args, env=no_mpi, timeout=30) for args in (["help", name], [name, "--help"], [name, "-h"])]
    ok = all(p.returncode == 0 and p.stdout == outs[0].stdout for p in outs)
    text = outs[0].stdout
    ztlib.check(ok and text.startswith(f"zerotrain {name} — ") and "usage: zerotrain " + name in text
                and "examples:" in text and "exit status: 0 done" in text, f"help_{name}",
                "".join(p.stderr[-300:] for p in outs) + text[:300])
    body = bodies.get(fn, "")
    flags = set(re.findall(r'str(?:n?)cmp\((?:a|arg|argv\[i\]), "(-[-a-zA-Z]+)"', body))
    for table in re.findall(r"opts\[\] = \{([^}]*)\}", body):  # a parser that walks a list of its options
        flags |= set(re.findall(r'"(-[-a-zA-Z]+)"', table))
    flags -= {f for f in flags if re.search(r'"%s"\).*internal' % re.escape(f), body)}  # test-only switches
    flags -= {"--set="}
    options = set(re.findall(r"^  (-[-a-zA-Z]+(?:, -[-a-zA-Z]+)*)", text, re.M))
    listed = {o for line in options for o in line.split(", ")}
    missing = sorted(f for f in flags if f not in listed)
    ztlib.check(body and not missing, f"help_{name}_lists_every_option", f"parser takes {missing}, help lists {sorted(listed)}")

p = ztlib.run(["sample", "model", "--top-kk", "3"])
ztlib.check(p.returncode == 2 and p.stderr.startswith("zerotrain: error: sample: unknown option '--top-kk' (did you "
                                                        "mean '--top-k'?)\nusage: zerotrain sample"),
            "unknown_option_one_wording", p.stderr[-300:])
wordings = set()
for name, args in (("predict", ["configs/tiny.yaml", "--hw", "h200", "--bogus"]), ("estimate", ["--bogus"]),
                   ("export", ["ck", "--bogus"]), ("config", ["--bogus"]), ("train", ["configs/tiny.yaml", "--bogus"]),
                   ("eval", ["m", "--bogus"]), ("interval", ["--bogus"]), ("calibrate", ["--bogus"]),
                   ("selftest", ["--bogus"]), ("run", ["-n", "1", "--bogus", "configs/tiny.yaml"]),
                   ("tokenize", ["--bogus"])):
    p = ztlib.run([name] + args, timeout=60)
    line = next((l for l in p.stderr.splitlines() if l.startswith("zerotrain: error:")), "")
    ztlib.check(p.returncode == 2 and f"unknown option '--bogus'" in line, f"unknown_option_{name}", p.stderr[-300:])
p = ztlib.run(["frobnicate"], env=no_mpi)
ztlib.check(p.returncode == 2 and "unknown command 'frobnicate'" in p.stderr, "unknown_command", p.stderr)
p = ztlib.run(["--version"], env=no_mpi)
ztlib.check(p.returncode == 0 and re.match(r"zerotrain \d+\.\d+\.\d+\n$", p.stdout), "version", p.stdout + p.stderr)
md = ztlib.run(["help", "--format", "md"], env=no_mpi).stdout
ztlib.check(md and md == ztlib.read_text(os.path.join(ztlib.ROOT, "docs", "cli.md")), "docs_cli_md_is_current",
            "regenerate: ./zerotrain help --format md > docs/cli.md")
keys = ztlib.run(["config", "--keys", "--format", "md"], env=no_mpi).stdout
conf = ztlib.read_text(os.path.join(ztlib.ROOT, "docs", "configuration.md"))
m = re.search(r"<!-- keys:begin[^\n]*-->\n(.*?)<!-- keys:end -->", conf, re.S)
ztlib.check(keys.startswith("| key |") and m and m.group(1) == keys, "docs_configuration_keys_are_current",
            "regenerate the block between the keys markers with: ./zerotrain config --keys --format md")
ztlib.finish()
