/* help.c — the one table of what every command takes (help.h): synopsis, each option with its
 * default, examples and exit statuses. `zerotrain help [CMD]`, `CMD --help`/`-h`, the usage line an
 * argument error prints, `zerotrain help --format md` (docs/cli.md) and the "did you mean" of an
 * unknown option all read it, so they cannot drift apart; test/t_cli_help.py checks that every
 * option a command's parser compares against appears here. */
#include "cmd/help.h"

#include <stdio.h>
#include <string.h>

#include "util/util.h"

typedef struct option_help {
    const char *flag;    /* "--seq-len", or "-o, --output" */
    const char *arg;     /* "T", or NULL for a switch */
    const char *text;    /* what it does, with "(default ...)" where it has one */
} option_help;

typedef struct command_help {
    const char *name, *summary;
    const char *synopsis[3];
    const char *about;
    option_help options[16];
    const char *examples[4];
    const char *exits; /* beyond 0 done, 1 failed (one error line), 2 usage */
} command_help;

#define SET_OPTION {"--set", "KEY=VALUE", "override one dotted config key (repeatable; KEY=null removes a key the file sets)"}
#define DEVICE_OPTION {"--device", "D", "auto, cpu, cuda or sim (the simulated GPU); default auto: cuda when a GPU is usable"}

static const command_help commands[] = {
    {"train", "train a GPT-2 (alone, under mpirun/srun, or started by `run`)",
     {"zerotrain train CONFIG [--set KEY=VALUE]..."},
     "CONFIG is a YAML file or a DeepSpeed JSON config (DeepSpeed's key names). Every rank prints one line per "
     "step; with checkpoint.dir set, the run resumes from its `latest` (checkpoint.resume: auto).",
     {SET_OPTION},
     {"zerotrain train configs/tiny.yaml",
      "mpirun -np 2 zerotrain train configs/tiny.yaml --set zero_optimization.stage=2",
      "zerotrain train ds_config.json --set checkpoint.dir=ck --set train_iters=200"},
     "99 stopped by SIGUSR1, SIGTERM or SIGINT after saving a checkpoint (requeue to resume)"},
    {"run", "start the training job: srun inside a Slurm allocation, else mpirun with the right flags",
     {"zerotrain run -n N [--tp T] [--hostfile FILE] [--restarts N] CONFIG [--set KEY=VALUE]..."},
     "Ctrl-C (or SIGTERM) makes the ranks finish their step, save and exit 99; a second one stops them at once.",
     {{"-n, --ranks, -np", "N", "ranks to start (required)"},
      {"--tp", "T", "tensor_parallel.tp_size T: each group of T consecutive ranks on one node"},
      {"--hostfile", "FILE", "Open MPI or DeepSpeed hostfile (\"host slots=K\" lines); hosts are reached by ssh"},
      {"--restarts, --max-restarts", "N", "start a failed job again from `latest`, up to N times (default 0)"},
      SET_OPTION},
     {"zerotrain run -n 2 configs/tiny.yaml", "zerotrain run -n 4 --tp 2 configs/tiny.yaml",
      "zerotrain run -n 16 --hostfile hosts --restarts 5 big.yaml --set checkpoint.dir=/shared/ck"},
     "99 stopped by a signal after the ranks saved a checkpoint"},
    {"tokenize", "turn text files into GPT-2 token shards",
     {"zerotrain tokenize [--vocab PATH] INPUT... -o PREFIX [--val-fraction F] [--shard-tokens N] [-j N]"},
     "Several inputs are separate documents, joined by <|endoftext|> (id 50256; a tokenizer.json's <|endoftext|>, "
     "<|end_of_text|> or </s>). The input streams in 1 MiB blocks (bounded memory at any size); the first F of the "
     "tokens go to PREFIX_val.bin. Shards hold uint16 ids, uint32 for a vocabulary over 65536 tokens (llm.c's Llama 3 shards).",
     {{"--vocab", "PATH", "a Hugging Face tokenizer.json (byte-level BPE: GPT-2, Llama 3, Qwen2 style), or a folder with "
                         "tokenizer.json or GPT-2's encoder.json and vocab.bpe (default: $ZEROTRAIN_VOCAB, data/gpt2, or beside the binary)"},
      {"-o, --output", "PREFIX", "writes PREFIX_val.bin and PREFIX_train_000000.bin, ... (required)"},
      {"--val-fraction", "F", "fraction of the tokens, taken from the head, for validation (default 0.1; 0 = none)"},
      {"--shard-tokens", "N", "at most N tokens per train shard (default 100000000)"},
      {"-j, --threads", "N", "encoding threads (default: the cores this process may use)"}},
     {"zerotrain tokenize data/tinyshakespeare.txt -o data/tinyshakespeare",
      "zerotrain tokenize --val-fraction 0 a.txt b.txt -o build/ab"},
     NULL},
    {"sample", "generate text from a model",
     {"zerotrain sample MODEL [--prompt TEXT] [--max-tokens N] [--temperature F] [--top-k K] [--seed S]",
      "                 [--vocab PATH] [--print-ids] [--device D]"},
     "MODEL is a checkpoint directory, a step directory or a Hugging Face directory (GPT-2, Llama, Qwen2, Mistral).",
     {{"--prompt", "TEXT", "text to continue (default: <|endoftext|>, a fresh document)"},
      {"--max-tokens", "N", "tokens to generate (default 64)"},
      {"--temperature", "F", "softmax temperature, 0 = greedy (default 1.0)"},
      {"--top-k", "K", "sample among the K likeliest tokens; 1 = greedy, 0 = all (default 40)"},
      {"--seed", "S", "sampling seed (default 1337)"},
      {"--vocab", "PATH", "tokenizer.json or vocabulary folder, as for tokenize (default: $ZEROTRAIN_VOCAB, data/gpt2, or beside the binary)"},
      {"--print-ids", NULL, "print token ids instead of text"},
      DEVICE_OPTION},
     {"zerotrain sample ck --prompt 'ROMEO:' --max-tokens 100", "zerotrain sample hf_gpt2/ --top-k 1 --print-ids"},
     NULL},
    {"eval", "the mean loss of a model on a token shard",
     {"zerotrain eval MODEL --data FILE [--batch-size B] [--seq-len T] [--batches N] [--grads FILE] [--device D]"},
     "Prints `val_loss: X`; a loss that is not finite is an error (exit 1).",
     {{"--data", "FILE", "a token shard (from `tokenize`; required)"},
      {"--batch-size", "B", "sequences per batch (default 4)"},
      {"--seq-len", "T", "tokens per sequence, at most the model's n_positions (default 64)"},
      {"--batches", "N", "batches, read in order from the shard's start (default 10)"},
      {"--grads", "FILE", "also write the fp32 gradients of the mean loss, raw, in the flat parameter order"},
      DEVICE_OPTION},
     {"zerotrain eval ck --data data/tinyshakespeare_val.bin --batches 20"}, NULL},
    {"config", "check a config and print the effective one (every key, defaults filled in)",
     {"zerotrain config CONFIG [--ranks N] [--set KEY=VALUE]...", "zerotrain config --keys [--format md]"},
     "Nothing runs: the config is checked as `train` checks it.",
     {{"--ranks", "N", "check it for N ranks (default 1)"}, {"--keys", NULL, "list every key with its default and meaning"},
      {"--format", "md", "with --keys: a Markdown table that also says what each key accepts (docs/configuration.md)"},
      SET_OPTION},
     {"zerotrain config configs/tiny.yaml --set zero_optimization.stage=3", "zerotrain config ds_config.json --ranks 8",
      "zerotrain config --keys"},
     NULL},
    {"estimate", "memory per rank for each ZeRO stage and offload setting",
     {"zerotrain estimate CONFIG --ranks N [--tp N] [--device-mem SIZE] [--host-mem SIZE] [--nvme-size SIZE]",
      "                   [--ranks-per-node K] [--dtype bf16|fp32] [--ratio R[,R...]] [--hw PROFILE] [--set KEY=VALUE]..."},
     "Sizes are computed, nothing is allocated and no data is read.",
     {{"--ranks", "N", "data-parallel x tensor-parallel ranks (required)"},
      {"--tp", "N", "tensor-parallel ranks (default the config's tensor_parallel.tp_size)"},
      {"--device-mem", "SIZE", "device memory per rank (default 80GiB, or the profile's)"},
      {"--host-mem", "SIZE", "host memory per node (default 512GiB, or the profile's)"},
      {"--nvme-size", "SIZE", "NVMe space per node (default: no limit)"},
      {"--ranks-per-node", "K", "ranks sharing a node's host memory (default min(ranks, 8))"},
      {"--dtype", "bf16|fp32", "the parameters' and gradients' type on the device (default bf16)"},
      {"--ratio", "R[,R...]", "Twin-Flow ratios to add rows for"},
      {"--hw", "PROFILE", "a hardware profile (configs/hw/): its memories, and a predicted step time"},
      SET_OPTION},
     {"zerotrain estimate configs/gpt2_10b_offload.yaml --ranks 8 --hw h200",
      "zerotrain estimate configs/tiny.yaml --ranks 4 --device-mem 16GiB --ratio 0.5,0.8"},
     NULL},
    {"predict", "the step time of a config on a GPU machine, on a virtual clock",
     {"zerotrain predict CONFIG --hw PROFILE [--ranks N [--tp T]] [--steps K] [--perform] [--trace FILE]",
      "                  [--set KEY=VALUE]..."},
     "Runs the real engine on the simulated GPU whose clock the profile sets; the work is costed, not performed "
     "(no data is read), so models far larger than this machine predict.",
     {{"--hw", "PROFILE", "h100-sxm, h100-pcie, h200, a100-40gb, v100-32gb, dgx-h100 (configs/hw/) or a file (required)"},
      {"--ranks", "N", "ranks of the job (default 1)"},
      {"--tp", "T", "tensor-parallel ranks (default the config's)"},
      {"--steps", "K", "steps to run; the first is warm-up (default 3)"},
      {"--perform", NULL, "also perform the work (the schedule is the same)"},
      {"--trace", "FILE", "write the predicted lanes as a Chrome trace"},
      SET_OPTION},
     {"zerotrain predict configs/gpt2_10b_offload.yaml --hw h200 --set zero_optimization.offload_optimizer.ratio=auto",
      "zerotrain predict configs/gpu_peer_1p5b.yaml --hw h100-sxm --ranks 8 --trace peer.json"},
     NULL},
    {"calibrate", "measure this machine as the simulated GPU runs on it, as a hardware profile",
     {"zerotrain calibrate [-o FILE] [--dir DIR] [--tp T]"},
     "Takes about a minute of every core; `predict --hw FILE` then prices steps as they run here.",
     {{"-o", "FILE", "write the profile to FILE (default stdout)"},
      {"--dir", "DIR", "where the disk is measured (where NVMe swap would go; default .)"},
      {"--tp", "T", "a tensor-parallel rank's profile: the real step as T processes (1 or 2; default 1)"}},
     {"zerotrain calibrate -o here.yaml --dir /nvme"}, NULL},
    {"interval", "the checkpoint interval that loses the least time (Young/Daly)",
     {"zerotrain interval --mtbf SECONDS (--save-seconds C [--write-seconds W] | LOG...) [--step-seconds T] "
      "[--restart-seconds R]"},
     "LOG: train logs whose `save step N: blocked B ms, written W ms` lines (else `checkpoint: saved` lines) and step "
     "lines give the save and step times; an asynchronous save costs its blocked time, and a failure during its "
     "write loses it too.",
     {{"--mtbf", "SECONDS", "mean time between failures (required)"},
      {"--save-seconds", "C", "seconds one save blocks training"},
      {"--write-seconds", "W", "seconds from a save's start until it is complete (asynchronous saves; default C)"},
      {"--step-seconds", "T", "seconds per step, to give the interval in steps"},
      {"--restart-seconds", "R", "seconds a restart costs, for the expected goodput"}},
     {"zerotrain interval --mtbf 86400 --save-seconds 30 --step-seconds 1.2", "zerotrain interval --mtbf 43200 run.log"},
     NULL},
    {"export", "write a checkpoint's model as a Hugging Face directory or one HDF5 file",
     {"zerotrain export CHECKPOINT -o DIR [--format safetensors|hdf5] [--dtype fp32|bf16|fp16] [--vocab PATH]"},
     "The Hugging Face directory loads in transformers (AutoModelForCausalLM: GPT2LMHeadModel, LlamaForCausalLM, "
     "Qwen2ForCausalLM or MistralForCausalLM), with its tokenizer.",
     {{"-o, --output", "DIR", "output directory (required)"},
      {"--format", "safetensors|hdf5", "default safetensors"},
      {"--dtype", "fp32|bf16|fp16", "default fp32"},
      {"--vocab", "PATH", "the tokenizer to write: GPT-2's vocabulary folder, or a tokenizer.json (default as `sample`)"}},
     {"zerotrain export ck -o hf_model", "zerotrain export ck/step_00000400 -o hf16 --dtype bf16"}, NULL},
    {"info", "what a checkpoint holds, verified",
     {"zerotrain info CHECKPOINT"},
     "CHECKPOINT is a checkpoint directory (its `latest`) or a step directory; every checksum is checked.",
     {{NULL}},
     {"zerotrain info ck", "zerotrain info ck/step_00000400"}, NULL},
    {"selftest", "every GPU op against the CPU backend, then a short training run",
     {"zerotrain selftest [--device cuda|sim|cpu] [--seed N] [--allow-skip]",
      "zerotrain selftest --bench [--device cuda|cpu] [--fp16] [--bench-B B] [--bench-T T]"},
     "Under mpirun with 2+ ranks it also checks the NCCL collectives against MPI's.",
     {{"--device", "cuda|sim|cpu", "the backend to check (default cuda; cpu checks the harness itself)"},
      {"--seed", "N", "inputs' seed (default 1234)"},
      {"--allow-skip", NULL, "exit 0 when no GPU is usable"},
      {"--bench", NULL, "time every op at GPT-2 124M shapes instead"},
      {"--fp16", NULL, "with --bench: fp16 instead of bf16"},
      {"--bench-B", "B", "with --bench: batch (default 16)"},
      {"--bench-T", "T", "with --bench: sequence length (default 1024)"}},
     {"zerotrain selftest", "zerotrain selftest --device sim", "zerotrain selftest --bench --fp16"}, NULL},
};

#define N_COMMANDS (sizeof commands / sizeof commands[0])

static const command_help *find(const char *name) {
    for (size_t i = 0; name && i < N_COMMANDS; i++)
        if (!strcmp(commands[i].name, name)) return &commands[i];
    return NULL;
}

static void print_synopsis(FILE *f, const command_help *c) {
    for (int i = 0; i < 3 && c->synopsis[i]; i++) fprintf(f, "%s%s\n", i ? "       " : "usage: ", c->synopsis[i]);
}

/* "--seq-len T": an option as its synopsis writes it */
static const char *option_head(const option_help *o, char *buf, size_t cap) {
    snprintf(buf, cap, "%s%s%s", o->flag, o->arg ? " " : "", o->arg ? o->arg : "");
    return buf;
}

void zt_help_usage(FILE *f, const char *cmd) {
    const command_help *c = find(cmd);
    if (!c) return;
    print_synopsis(f, c);
    fprintf(f, "(zerotrain %s --help for more)\n", cmd);
}

static void print_exits(FILE *f, const command_help *c) {
    fprintf(f, "exit status: 0 done; 1 failed (one `zerotrain: error:` line); 2 a usage error%s%s\n",
            c->exits ? "; " : "", c->exits ? c->exits : "");
}

static void print_command(FILE *f, const command_help *c) {
    fprintf(f, "zerotrain %s — %s\n\n", c->name, c->summary);
    print_synopsis(f, c);
    fprintf(f, "\n%s\n", c->about);
    if (c->options[0].flag) {
        fprintf(f, "\noptions:\n");
        char head[64];
        for (int i = 0; i < 16 && c->options[i].flag; i++)
            fprintf(f, "  %-30s %s\n", option_head(&c->options[i], head, sizeof head), c->options[i].text);
    }
    fprintf(f, "\nexamples:\n");
    for (int i = 0; i < 4 && c->examples[i]; i++) fprintf(f, "  %s\n", c->examples[i]);
    fprintf(f, "\n");
    print_exits(f, c);
}

static void print_list(FILE *f) {
    fprintf(f, "zerotrain %s — ZeRO, offload and tensor parallelism for GPT-2, one C binary\n\n"
               "usage: zerotrain COMMAND [ARGS]      (zerotrain help COMMAND, or COMMAND --help, for one)\n\n",
            ZT_VERSION);
    for (size_t i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nzerotrain --version prints the version.\n");
}

/* docs/cli.md: the same text as Markdown */
static void print_markdown(FILE *f) {
    fprintf(f, "# zerotrain commands\n\nGenerated by `zerotrain help --format md` from src/cmd/help.c (test/t_cli_help.py "
               "fails when they differ). Every command also answers `--help`.\n\n");
    for (size_t i = 0; i < N_COMMANDS; i++) fprintf(f, "- [`%s`](#%s) — %s\n", commands[i].name, commands[i].name,
                                                    commands[i].summary);
    for (size_t i = 0; i < N_COMMANDS; i++) {
        const command_help *c = &commands[i];
        /* the synopsis is syntax, not a command (```text); the examples name files that stand for the
         * reader's (ck, hosts, big.yaml), so test/t_readme_commands.py is told not to run them */
        fprintf(f, "\n## %s\n\n%s.\n\n```text\n", c->name, c->summary);
        for (int k = 0; k < 3 && c->synopsis[k]; k++) fprintf(f, "%s\n", c->synopsis[k]);
        fprintf(f, "```\n\n%s\n\n", c->about);
        if (c->options[0].flag) {
            fprintf(f, "| option | meaning |\n|---|---|\n");
            char head[64];
            for (int k = 0; k < 16 && c->options[k].flag; k++)
                fprintf(f, "| `%s` | %s |\n", option_head(&c->options[k], head, sizeof head), c->options[k].text);
            fprintf(f, "\n");
        }
        fprintf(f, "<!-- not run: examples; the files they name stand for yours, zerotrain for ./zerotrain -->\n```\n");
        for (int k = 0; k < 4 && c->examples[k]; k++) fprintf(f, "%s\n", c->examples[k]);
        fprintf(f, "```\n\n");
        print_exits(f, c);
    }
}

static int is_help_flag(const char *a) { return !strcmp(a, "--help") || !strcmp(a, "-h"); }

int zt_help_answer(int argc, char **argv, int *rc) {
    *rc = 0;
    if (argc >= 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V"))) {
        printf("zerotrain %s\n", ZT_VERSION);
        return 1;
    }
    if (argc >= 2 && (!strcmp(argv[1], "help") || is_help_flag(argv[1]))) {
        if (argc >= 4 && !strcmp(argv[2], "--format") && !strcmp(argv[3], "md")) print_markdown(stdout);
        else if (argc >= 3 && find(argv[2])) print_command(stdout, find(argv[2]));
        else if (argc >= 3) {
            fprintf(stderr, "zerotrain: error: help: no command '%s'\n", argv[2]);
            print_list(stderr);
            *rc = 2;
        } else print_list(stdout);
        return 1;
    }
    /* CMD --help anywhere among its arguments, before the command parses any of them */
    const command_help *c = argc >= 2 ? find(argv[1]) : NULL;
    for (int i = 2; c && i < argc; i++)
        if (is_help_flag(argv[i])) {
            print_command(stdout, c);
            return 1;
        }
    return 0;
}

/* SUGGESTION: " (did you mean '--y'?)" for the option of C nearest to ARG (util's zt_suggest), or "";
 * 1 when ARG is one of C's options */
static int nearest_option(const command_help *c, const char *arg, char *suggestion, size_t cap) {
    char flags[16][4][32]; /* the candidates' text, while zt_suggest reads them */
    const char *cands[64];
    int n = 0, known = 0;
    for (int i = 0; c && i < 16 && c->options[i].flag; i++) {
        char list[64];
        snprintf(list, sizeof list, "%s", c->options[i].flag);
        int k = 0;
        for (char *save = NULL, *tok = strtok_r(list, ", ", &save); tok && k < 4; tok = strtok_r(NULL, ", ", &save)) {
            snprintf(flags[i][k], sizeof flags[i][k], "%s", tok);
            known |= !strcmp(tok, arg);
            cands[n++] = flags[i][k++];
        }
    }
    zt_suggest(arg, cands, n, suggestion, cap);
    return known;
}

void zt_help_bad_argument_text(const char *cmd, const char *arg, const char *value, char *buf, size_t cap) {
    char suggestion[96];
    int known = nearest_option(find(cmd), arg, suggestion, sizeof suggestion);
    if (arg[0] != '-' || !arg[1]) snprintf(buf, cap, "%s: unexpected argument '%.200s'", cmd, arg);
    else if (known && value) snprintf(buf, cap, "%s: bad value '%.200s' for %s", cmd, value, arg);
    else if (known) snprintf(buf, cap, "%s: %s needs a value", cmd, arg);
    else snprintf(buf, cap, "%s: unknown option '%.200s'%s", cmd, arg, suggestion);
}

int zt_help_missing(const char *cmd, const char *what) {
    fprintf(stderr, "zerotrain: error: %s: missing %s\n", cmd, what);
    zt_help_usage(stderr, cmd);
    return 2;
}

int zt_help_bad_argument(const char *cmd, const char *arg, const char *value) {
    char msg[512];
    zt_help_bad_argument_text(cmd, arg, value, msg, sizeof msg);
    fprintf(stderr, "zerotrain: error: %s\n", msg);
    zt_help_usage(stderr, cmd);
    return 2;
}
