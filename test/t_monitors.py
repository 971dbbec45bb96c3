"""t_monitors.py — seeing runs where people look: DeepSpeed's `tensorboard` and `csv_monitor`
sections and the Chrome trace.

TensorBoard: the event files zerotrain writes (its own TFRecord/protobuf writer, no TensorFlow)
are read by the real `tensorboard` package: every record's CRCs check out, the scalars equal the
metrics_file values at every step (x axis: global samples, as DeepSpeed logs them), a resumed run
replaces the steps after its checkpoint, a run killed with SIGKILL leaves a file that still reads,
and a `tensorboard --logdir output_path` server started here shows the run over its HTTP API.
CSV: DeepSpeed's file names and headers, the same values. Trace: its directory is created with
parents, a SIGKILLed run leaves a file that opens, and two ranks share one time base. Bad paths
fail with one clear line on every rank.

Needs the pinned TensorBoard that scripts/install-deps.sh installs into the project's PyPI venv
(test/ztlib.py: use_pypi_env re-runs this file under it)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ztlib  # noqa: E402

ztlib.use_pypi_env("tensorboard")

import csv
import glob
import json
import math
import re
import signal
import socket
import struct
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

ztlib.ensure_shakespeare()
CFG = "configs/tiny.yaml"
GLOBAL_BATCH = 8  # tiny.yaml's train_batch_size: the x axis advances by this per step
TENSORBOARD = os.path.join(os.path.dirname(sys.executable), "tensorboard")

# metrics_file key -> tag; DeepSpeed's names first, then ours
TAGS = {"loss": "Train/Samples/train_loss", "lr": "Train/Samples/lr", "loss_scale": "Train/Samples/loss_scale",
        "forward_ms": "Train/Samples/elapsed_time_ms_forward", "backward_ms": "Train/Samples/elapsed_time_ms_backward",
        "optimizer_ms": "Train/Samples/elapsed_time_ms_step",
        "grad_norm": "Train/Samples/grad_norm", "val_loss": "Train/Samples/val_loss",
        "step_ms": "Train/Samples/step_ms", "tokens_per_s": "Train/Samples/tokens_per_s",
        "comm_ms": "Train/Samples/comm_ms", "mem_params_mib": "Train/Samples/mem_params_mib",
        "mem_optimizer_mib": "Train/Samples/mem_optimizer_mib", "params_peak_mib": "Train/Samples/params_peak_mib"}


def sets(*kv):
    out = []
    for s in kv:
        out += ["--set", s]
    return out


def read_metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def accumulator(run_dir):
    acc = event_accumulator.EventAccumulator(run_dir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return acc


# the metrics file prints these with fixed decimals: half a unit of the last one is their rounding
ROUNDING = {"step_ms": 5e-4, "forward_ms": 5e-4, "backward_ms": 5e-4, "optimizer_ms": 5e-4, "comm_ms": 5e-4,
            "tokens_per_s": 0.05, "mem_params_mib": 5e-4, "mem_optimizer_mib": 5e-4, "params_peak_mib": 5e-4}


def close(a, b, rel, key="loss"):
    return abs(a - b) <= rel * max(abs(b), 1e-30) + ROUNDING.get(key, 0) + 1e-12


def expected_series(rows, key):
    """(x, value) of metrics key for every row that has a finite value"""
    return [(r["step"] * GLOBAL_BATCH, r[key]) for r in rows
            if r.get(key) is not None and math.isfinite(r[key])]


def check_records(path, name):
    """TFRecord framing of every record (CRCs computed by tensorboard's own masked_crc32c) and the
    first event's file_version"""
    data = open(path, "rb").read()
    pos, events, why = 0, [], ""
    while pos < len(data):
        if pos + 12 > len(data):
            why = f"truncated header at {pos}"
            break
        (n,) = struct.unpack("<Q", data[pos:pos + 8])
        (crc_len,) = struct.unpack("<I", data[pos + 8:pos + 12])
        body = data[pos + 12:pos + 12 + n]
        if len(body) < n or pos + 16 + n > len(data):
            why = f"truncated record at {pos}"
            break
        (crc_data,) = struct.unpack("<I", data[pos + 12 + n:pos + 16 + n])
        if crc_len != masked_crc32c(data[pos:pos + 8]) or crc_data != masked_crc32c(body):
            why = f"bad CRC in the record at {pos}"
            break
        ev = event_pb2.Event()
        ev.ParseFromString(body)
        events.append(ev)
        pos += 16 + n
    ztlib.check(not why and events and events[0].file_version == "brain.Event:2",
                name, why or f"{len(events)} events, first {events[:1]}")
    return events


# ---------------------------------------------------------------------------------------------
# 1. a run with both monitors: fp16 (loss scale, one injected overflow), evaluation, breakdown
with tempfile.TemporaryDirectory() as tmp:
    tb_out, csv_out, metrics = os.path.join(tmp, "tb"), os.path.join(tmp, "csvs"), os.path.join(tmp, "m.jsonl")
    p = ztlib.run(["train", CFG] + sets("train_iters=6", "eval_interval=3", "eval_batches=2",
                                        "wall_clock_breakdown=true", "fp16.enabled=true",
                                        f"metrics_file={metrics}",
                                        f"tensorboard={{enabled: true, output_path: {tb_out}, job_name: run1}}",
                                        f"csv_monitor={{enabled: true, output_path: {csv_out}, job_name: run1}}"),
                  env={"ZEROTRAIN_INJECT_OVERFLOW": "2"})
    rows = read_metrics(metrics) if os.path.exists(metrics) else []
    ztlib.check(p.returncode == 0 and len(rows) == 6 and rows[1]["grad_norm"] is None,
                "monitored_run", p.stderr[-1500:])

    files = glob.glob(os.path.join(tb_out, "run1", "*"))
    host = re.escape(socket.gethostname())
    ztlib.check(len(files) == 1 and re.fullmatch(r"events\.out\.tfevents\.\d{10}\.%s\.\d+" % host,
                                                 os.path.basename(files[0])) is not None,
                "tb_event_file_in_output_path_job_name", f"{files}")
    if files:
        check_records(files[0], "tb_records_crc_and_file_version")

    acc = accumulator(os.path.join(tb_out, "run1"))
    tags = set(acc.Tags()["scalars"])
    ztlib.check(set(TAGS.values()) <= tags, "tb_has_deepspeed_and_our_tags", f"missing {set(TAGS.values()) - tags}")
    bad = []
    for key, tag in TAGS.items():
        if tag not in tags:
            continue
        got = [(e.step, e.value) for e in acc.Scalars(tag)]
        want = expected_series(rows, key)
        # simple_value is a float32
        if [s for s, _ in got] != [s for s, _ in want] or not all(close(g, w, 1e-6, key)
                                                                 for (_, g), (_, w) in zip(got, want)):
            bad.append(f"{tag}: got {got} want {want}")
    ztlib.check(not bad and rows, "tb_scalars_equal_metrics_every_step", "\n".join(bad)[:2000])
    ztlib.check([e.step for e in acc.Scalars("Train/Samples/val_loss")] == [24, 48] if "Train/Samples/val_loss" in tags
                else False, "tb_val_loss_on_eval_steps", "")
    ztlib.check("Train/Samples/grad_norm" in tags and 16 not in [e.step for e in acc.Scalars("Train/Samples/grad_norm")],
                "tb_overflow_step_has_no_grad_norm", "")

    # CSV: DeepSpeed's layout (file = tag with '/' -> '_', header "step,<last part>")
    bad = []
    for key, tag in TAGS.items():
        path = os.path.join(csv_out, "run1", tag.replace("/", "_") + ".csv")
        try:
            with open(path, newline="") as f:
                raw = f.read()
            table = list(csv.reader(raw.splitlines()))
        except OSError as e:
            bad.append(str(e))
            continue
        want = expected_series(rows, key)
        if table[0] != ["step", tag.split("/")[-1]] or not raw.endswith("\r\n"):
            bad.append(f"{path}: header {table[0]}")
        got = [(int(s), float(v)) for s, v in table[1:]]
        if [s for s, _ in got] != [s for s, _ in want] or not all(close(g, w, 1e-8, key)
                                                                 for (_, g), (_, w) in zip(got, want)):
            bad.append(f"{path}: got {got} want {want}")
    ztlib.check(not bad and rows, "csv_files_deepspeed_layout_equal_metrics", "\n".join(bad)[:2000])

    # 2. a TensorBoard server started on output_path shows the run (loopback only, bounded, killed)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([TENSORBOARD, "--logdir", tb_out, "--host", "127.0.0.1", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    base = f"http://127.0.0.1:{port}/data/plugin/scalars"
    shown, why = None, ""
    try:
        deadline = time.time() + 90
        while time.time() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(base + "/tags", timeout=5) as r:
                    tags_json = json.load(r)
                if "Train/Samples/train_loss" in tags_json.get("run1", {}):
                    q = urllib.parse.urlencode({"run": "run1", "tag": "Train/Samples/train_loss"})
                    with urllib.request.urlopen(f"{base}/scalars?{q}", timeout=5) as r:
                        shown = json.load(r)
                    break
                why = f"tags so far: {tags_json}"
            except OSError as e:
                why = str(e)
            time.sleep(1)
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    want = expected_series(rows, "loss")
    ztlib.check(shown is not None and [int(s) for _, s, _ in shown] == [s for s, _ in want] and
                all(close(v, w, 1e-6) for (_, _, v), (_, w) in zip(shown, want)),
                "tensorboard_server_shows_the_run", f"{why} {shown} {server.stderr.read().decode()[-500:]}")

# ---------------------------------------------------------------------------------------------
# 3. resume: the steps after the checkpoint are replaced, in TensorBoard and in the CSV files
with tempfile.TemporaryDirectory() as tmp:
    common = sets("train_iters=4", f"checkpoint.dir={tmp}/ck",
                  f"tensorboard={{enabled: true, output_path: {tmp}/tb}}",
                  f"csv_monitor={{enabled: true, output_path: {tmp}/tb}}")
    p1 = ztlib.run(["train", CFG] + common + sets("checkpoint.save_interval=2", f"metrics_file={tmp}/m1.jsonl"))
    time.sleep(1.1)  # a new event file name (unix seconds in it)
    user_csv = os.path.join(tmp, "tb", "DeepSpeedJobName", "user.csv")  # not ours: left alone on resume
    if os.path.isdir(os.path.dirname(user_csv)):
        with open(user_csv, "w") as f:
            f.write("step,x\n999,1\n")
    # resume from step 2 with another learning rate: steps 3-4 differ from the first run's
    p2 = ztlib.run(["train", CFG] + common + sets(f"checkpoint.resume={tmp}/ck/step_00000002",
                                                  "optimizer.params.lr=1e-2", f"metrics_file={tmp}/m2.jsonl"))
    ok = p1.returncode == 0 and p2.returncode == 0
    if ztlib.check(ok, "resume_runs", (p1.stderr + p2.stderr)[-1500:]):
        m1, m2 = read_metrics(f"{tmp}/m1.jsonl"), read_metrics(f"{tmp}/m2.jsonl")
        want = [(8, m1[0]["loss"]), (16, m1[1]["loss"]), (24, m2[0]["loss"]), (32, m2[1]["loss"])]
        run_dir = os.path.join(tmp, "tb", "DeepSpeedJobName")
        got = [(e.step, e.value) for e in accumulator(run_dir).Scalars("Train/Samples/train_loss")]
        ztlib.check(len(glob.glob(run_dir + "/events.out.tfevents.*")) == 2 and [s for s, _ in got] == [8, 16, 24, 32]
                    and all(close(g, w, 1e-6) for (_, g), (_, w) in zip(got, want)) and m1[3]["loss"] != m2[1]["loss"],
                    "tb_resume_replaces_steps_after_checkpoint", f"got {got} want {want}")
        with open(os.path.join(run_dir, "Train_Samples_train_loss.csv"), newline="") as f:
            table = list(csv.reader(f.read().splitlines()))
        ztlib.check(table[0] == ["step", "train_loss"] and [int(r[0]) for r in table[1:]] == [8, 16, 24, 32] and
                    all(close(float(r[1]), w, 1e-8) for r, (_, w) in zip(table[1:], want)),
                    "csv_resume_one_header_steps_replaced", f"{table}")
        ztlib.check(open(user_csv).read() == "step,x\n999,1\n", "csv_resume_leaves_other_files_alone", "")

# ---------------------------------------------------------------------------------------------
# 4. SIGKILL mid-run: the event file still reads, the CSV rows parse, the trace still opens
with tempfile.TemporaryDirectory() as tmp:
    metrics = os.path.join(tmp, "m.jsonl")
    args = [ztlib.BIN, "train", CFG] + sets("train_iters=100000", f"metrics_file={metrics}",
                                            f"tensorboard={{enabled: true, output_path: {tmp}/tb, job_name: k}}",
                                            f"csv_monitor={{enabled: true, output_path: {tmp}/tb, job_name: k}}",
                                            f"trace={tmp}/trace/run.json")
    proc = subprocess.Popen(args, cwd=ztlib.ROOT, env=ztlib.ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if os.path.exists(metrics) and len(read_metrics(metrics)) >= 3:
            time.sleep(0.137)  # somewhere inside a later step
            break
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    rows = read_metrics(metrics) if os.path.exists(metrics) else []
    got = []
    try:
        got = [(e.step, e.value) for e in accumulator(f"{tmp}/tb/k").Scalars("Train/Samples/train_loss")]
    except (KeyError, OSError) as e:
        got = [str(e)]
    want = expected_series(rows, "loss")
    # the kill may fall between the metrics line and the event record of one step
    ztlib.check(proc.returncode == -signal.SIGKILL and len(got) >= 3 and len(got) >= len(want) - 1 and
                all(g[0] == w[0] and close(g[1], w[1], 1e-6) for g, w in zip(got, want)),
                "tb_after_sigkill_reads", f"rc {proc.returncode}, got {got}, want {want}")
    with open(f"{tmp}/tb/k/Train_Samples_train_loss.csv", newline="") as f:
        raw = f.read()
    table = list(csv.reader(raw.splitlines()))
    ztlib.check(raw.endswith("\r\n") and len(table) >= 4 and all(len(r) == 2 for r in table),
                "csv_after_sigkill_whole_rows", repr(raw[-200:]))
    # Chrome trace: the array's closing bracket is missing; Perfetto accepts that, and a JSON parser
    # does after the bracket is added back: the file ends after a complete event
    text = open(f"{tmp}/trace/run.rank0.json").read()
    events = None
    try:
        events = json.loads(text.rstrip() + "\n]")
    except ValueError as e:
        events = str(e)
    ztlib.check(text.rstrip().endswith("}") and isinstance(events, list) and
                sum(1 for e in events if e["ph"] == "X" and e["name"] == "forward") >= 3 and
                all(e["ph"] in ("X", "C", "M") for e in events),
                "trace_after_sigkill_opens", f"{str(events)[:300]} ... {text[-200:]!r}")

# ---------------------------------------------------------------------------------------------
# 5. trace: the directory is created with its parents; two ranks share one time base
with tempfile.TemporaryDirectory() as tmp:
    t_start = time.time()
    p = ztlib.run(["train", CFG] + sets("train_iters=4", f"trace={tmp}/a/b/run.json"), ranks=2)
    t_end = time.time()
    traces = {}
    for r in range(2):
        try:
            with open(f"{tmp}/a/b/run.rank{r}.json") as f:
                traces[r] = json.load(f)
        except (OSError, ValueError) as e:
            ztlib.check(False, f"trace_rank{r}_written", f"{e} {p.stderr[-800:]}")
    if ztlib.check(p.returncode == 0 and len(traces) == 2, "trace_dir_created_with_parents", p.stderr[-800:]):
        # microseconds since the Unix epoch: every event lies inside the run's wall-clock window
        timed = [e for r in traces for e in traces[r] if e["ph"] in ("X", "C")]
        ztlib.check(all(t_start - 1 <= e["ts"] / 1e6 <= t_end + 1 for e in timed),
                    "trace_time_base_is_unix_epoch", f"window {t_start}..{t_end}, {timed[:2]}")
        # the two files merged: each step's first forward starts at the same time on both ranks
        # (they leave the previous step's blocking collectives together)
        starts = {r: [e["ts"] for e in traces[r] if e["ph"] == "X" and e["name"] == "forward"] for r in traces}
        per_step = [abs(a - b) for a, b in zip(starts[0][2::2], starts[1][2::2])]  # 2 micro-steps a step; from step 2
        merged = sorted(traces[0] + traces[1], key=lambda e: e.get("ts", 0))
        ztlib.check(len(per_step) >= 2 and sorted(per_step)[len(per_step) // 2] < 100e3 and
                    {e["pid"] for e in merged} == {0, 1},
                    "trace_ranks_line_up_when_merged", f"start differences (us) {per_step}")

# ---------------------------------------------------------------------------------------------
# 6. bad paths and config: one clear line, non-zero exit on every rank
with tempfile.TemporaryDirectory() as tmp:
    blocker = os.path.join(tmp, "file")
    open(blocker, "w").close()
    p = ztlib.run(["train", CFG] + sets(f"tensorboard={{enabled: true, output_path: {blocker}/tb}}"), ranks=2,
                  timeout=120)
    errs = [l for l in p.stderr.splitlines() if l.startswith("zerotrain: error:")]
    ztlib.check(p.returncode != 0 and len(errs) >= 1 and f"{blocker}/tb" in errs[0] and "cannot create" in errs[0],
                "tb_bad_output_path_fails_all_ranks", p.stderr[-800:])
    p = ztlib.run(["train", CFG] + sets(f"trace={blocker}/x/run.json"), ranks=2, timeout=120)
    errs = [l for l in p.stderr.splitlines() if l.startswith("zerotrain: error:")]
    ztlib.check(p.returncode != 0 and len(errs) >= 1 and f"{blocker}/x" in errs[0], "trace_bad_dir_fails_all_ranks",
                p.stderr[-800:])
    bad_cfg = os.path.join(tmp, "bad.yaml")
    with open(bad_cfg, "w") as f:
        f.write(open(os.path.join(ztlib.ROOT, CFG)).read() + "tensorboard:\n  enabled: true\n  outptu_path: x\n")
    p = ztlib.run(["train", bad_cfg])
    ztlib.check(p.returncode != 0 and re.search(r"bad\.yaml:\d+:3: unknown key 'outptu_path' in tensorboard "
                                                r"\(did you mean 'output_path'\?\)", p.stderr) is not None,
                "config_unknown_monitor_key", p.stderr[-500:])
    p = ztlib.run(["train", CFG] + sets("csv_monitor.enabled=\"yes\""))
    ztlib.check(p.returncode != 0 and "csv_monitor.enabled: expected true or false" in p.stderr,
                "config_monitor_enabled_must_be_bool", p.stderr[-500:])
    p = ztlib.run(["train", CFG] + sets("train_iters=1", "wandb={enabled: true, project: x, team: y}"))
    ztlib.check(p.returncode == 0 and "note: wandb is not supported" in p.stdout, "config_wandb_enabled_note",
                p.stdout[-500:] + p.stderr[-500:])
    # the effective config names the monitors and loads back to the same text
    p = ztlib.run(["train", CFG] + sets("train_iters=1", "print_config=true",
                                        f"tensorboard={{enabled: true, output_path: {tmp}/e}}"))
    eff = p.stdout.split("effective config (configs/tiny.yaml):\n", 1)[-1].split("\nmodel: GPT-2", 1)[0]
    eff_file = os.path.join(tmp, "eff.yaml")
    with open(eff_file, "w") as f:
        f.write(eff)
    p2 = ztlib.run(["train", eff_file, "--set", "train_iters=1", "--set", "print_config=true"])
    eff2 = p2.stdout.split(f"effective config ({eff_file}):\n", 1)[-1].split("\nmodel: GPT-2", 1)[0]
    ztlib.check(p.returncode == 0 and f'tensorboard:\n  enabled: true\n  output_path: "{tmp}/e"\n  job_name: '
                '"DeepSpeedJobName"\ncsv_monitor:\n  enabled: false' in eff and
                eff.split("\n", 1)[1] == eff2.split("\n", 1)[1],
                "config_effective_text_round_trip", eff[-400:] + "\n---\n" + eff2[-400:])

ztlib.finish()
