/* test_config.c — the config loader: defaults, a full YAML file, a DeepSpeed JSON file, every error
 * class with its FILE:LINE:COL, --set overrides, the batch rule and the effective-text round trip.
 * With "--load FILE [--set K=V]...", it is instead a tiny driver for test/t_config_errors.sh: it
 * loads the file, prints the effective text (or "zerotrain: error: ..." and exits 1). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "config/config.h"

static char tmpdir[256];

static const char *write_tmp(const char *name, const char *text) {
    static char path[8][512];
    static int slot = 0;
    char *p = path[slot++ % 8];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    FILE *f = fopen(p, "w");
    if (!f) { perror(p); exit(2); }
    fputs(text, f);
    fclose(f);
    return p;
}

/* Loads TEXT from a file named NAME with the given overrides; returns the load status. */
static int load_text(zt_config *c, const char *name, const char *text, char *const *ov, int nov, zt_err *err) {
    memset(err, 0, sizeof *err);
    const char *p = text ? write_tmp(name, text) : NULL;
    return zt_config_load(c, p, ov, nov, err);
}

/* Expects loading TEXT to fail with exactly "NAME-PATH:" + WANT (WANT starts at the position). */
static void expect_error(const char *check, const char *name, const char *text, const char *want) {
    zt_config c;
    zt_err err;
    int rc = load_text(&c, name, text, NULL, 0, &err);
    char full[1200];
    snprintf(full, sizeof full, "%s/%s:%s", tmpdir, name, want);
    CHECK(rc != 0 && strcmp(err.msg, full) == 0, check, "rc %d\n  got:  %s\n  want: %s", rc, err.msg, full);
    zt_config_free(&c);
}

static void expect_override_error(const char *check, char *const *ov, int nov, const char *want) {
    zt_config c;
    zt_err err;
    int rc = load_text(&c, "ov.yaml", NULL, ov, nov, &err);
    CHECK(rc != 0 && strcmp(err.msg, want) == 0, check, "rc %d\n  got:  %s\n  want: %s", rc, err.msg, want);
    zt_config_free(&c);
}


static const char *full_yaml =
    "# a full zerotrain config\n"
    "model:\n"
    "  n_layer: 4\n"
    "  n_head: 4\n"
    "  n_embd: 128\n"
    "  vocab_size: 50257\n"
    "  n_positions: 256\n"
    "  init_from: null\n"
    "data:\n"
    "  train: data/tiny_train_*.bin\n"
    "  val: \"data/tiny_val.bin\"\n"
    "  seq_len: 128\n"
    "train_micro_batch_size_per_gpu: 8\n"
    "gradient_accumulation_steps: 2\n"
    "train_iters: 500\n"
    "optimizer:\n"
    "  type: AdamW\n"
    "  params:\n"
    "    lr: 3.0e-4\n"
    "    betas: [0.9, 0.99]\n"
    "    eps: 1e-8\n"
    "    weight_decay: 0.1\n"
    "    decay_all_params: true\n"
    "scheduler:\n"
    "  type: WarmupCosineLR\n"
    "  params:\n"
    "    total_num_steps: 500\n"
    "    warmup_num_steps: 50\n"
    "    warmup_min_ratio: 0.1\n"
    "    cos_min_ratio: 0.05\n"
    "    warmup_type: linear\n"
    "gradient_clipping: 1.0\n"
    "bf16: {enabled: true}\n"
    "zero_optimization:\n"
    "  stage: 3\n"
    "  overlap_comm: true\n"
    "  contiguous_gradients: false\n"
    "  reduce_bucket_size: 2e8\n"
    "  allgather_bucket_size: 300000000\n"
    "  stage3_prefetch_bucket_size: 1e7\n"
    "  stage3_param_persistence_threshold: 1e4\n"
    "  offload_optimizer:\n"
    "    device: cpu\n"
    "    ratio: auto\n"
    "    pin_memory: true\n"
    "    device_memory: 40GiB\n"
    "activation_checkpointing:\n"
    "  enabled: true\n"
    "  number_checkpoints: 2\n"
    "checkpoint:\n"
    "  dir: runs/ckpt\n"
    "  save_interval: 100\n"
    "  keep_last: 3\n"
    "  resume: never\n"
    "steps_per_print: 5\n"
    "eval_interval: 50\n"
    "eval_batches: 4\n"
    "sample_interval: 250\n"
    "sample_tokens: 32\n"
    "metrics_file: runs/metrics.jsonl\n"
    "wall_clock_breakdown: true\n"
    "trace: runs/trace.json\n"
    "seed: 42\n"
    "device: cpu\n";

static const char *ds_json =
    "{\n"
    "  \"train_batch_size\": 32,\n"
    "  \"train_micro_batch_size_per_gpu\": 4,\n"
    "  \"steps_per_print\": 100,\n"
    "  \"gradient_clipping\": 1.0,\n"
    "  \"prescale_gradients\": false,\n"
    "  \"wall_clock_breakdown\": false,\n"
    "  \"optimizer\": {\n"
    "    \"type\": \"Adam\",\n"
    "    \"params\": {\"lr\": 0.0001, \"betas\": [0.8, 0.999], \"eps\": 1e-8, \"weight_decay\": 3e-7,\n"
    "               \"torch_adam\": false, \"adam_w_mode\": true}\n"
    "  },\n"
    "  \"scheduler\": {\n"
    "    \"type\": \"WarmupDecayLR\",\n"
    "    \"params\": {\"warmup_min_lr\": 0, \"warmup_max_lr\": 0.0001, \"warmup_num_steps\": 1000,\n"
    "               \"total_num_steps\": 10000}\n"
    "  },\n"
    "  \"fp16\": {\n"
    "    \"enabled\": true, \"loss_scale\": 0, \"initial_scale_power\": 12, \"loss_scale_window\": 500,\n"
    "    \"hysteresis\": 2, \"min_loss_scale\": 1\n"
    "  },\n"
    "  \"zero_optimization\": {\n"
    "    \"stage\": 2,\n"
    "    \"allgather_partitions\": true,\n"
    "    \"allgather_bucket_size\": 5e8,\n"
    "    \"overlap_comm\": true,\n"
    "    \"reduce_scatter\": true,\n"
    "    \"reduce_bucket_size\": 5e8,\n"
    "    \"contiguous_gradients\": true,\n"
    "    \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true},\n"
    "    \"offload_param\": {\"device\": \"none\"}\n"
    "  },\n"
    "  \"activation_checkpointing\": {\n"
    "    \"partition_activations\": false, \"cpu_checkpointing\": false,\n"
    "    \"contiguous_memory_optimization\": false, \"number_checkpoints\": null,\n"
    "    \"synchronize_checkpoint_boundary\": false, \"profile\": false\n"
    "  },\n"
    "  \"wandb\": {\"enabled\": false, \"project\": \"x\"}\n"
    "}\n";

static int driver(int argc, char **argv) {
    char *ov[64];
    int nov = 0;
    for (int i = 3; i + 1 < argc && nov < 64; i += 2)
        if (!strcmp(argv[i], "--set")) ov[nov++] = argv[i + 1];
    zt_config c;
    zt_err err;
    if (zt_config_load(&c, argv[2], ov, nov, &err)) {
        zt_print_error(&err);
        return 1;
    }
    fputs(c.effective_text, stdout);
    zt_config_free(&c);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "--load")) return driver(argc, argv);

    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/zt_test_config_XXXXXX", base);
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 2; }

    zt_config c, c2;
    zt_err err;

    /* ---- defaults ---- */
    zt_config_defaults(&c);
    CHECK(c.n_layer == 12 && c.n_head == 12 && c.n_embd == 768 && c.vocab_size == 50257 && c.n_positions == 1024 &&
              c.seq_len == 64 && !c.init_from,
          "defaults_model", "model defaults wrong");
    CHECK(c.train_micro_batch_size_per_gpu == 4 && c.gradient_accumulation_steps == 1 && c.train_batch_size == 0 &&
              c.train_iters == 100 && !c.micro_batch_given && !c.grad_accum_given,
          "defaults_batch", "batch defaults wrong");
    CHECK(!strcmp(c.optimizer_type, "AdamW") && c.lr == 6e-4f && c.beta1 == 0.9f && c.beta2 == 0.95f &&
              c.eps == 1e-8f && c.weight_decay == 0 && c.scheduler == ZT_SCHED_CONSTANT && c.warmup_num_steps == 1000 &&
              c.warmup_type_log == 1 && c.warmup_min_lr == 0,
          "defaults_optimizer", "optimizer/scheduler defaults wrong");
    CHECK(c.zero_stage == 0 && !c.overlap_comm && c.contiguous_gradients && c.reduce_bucket_size == 5e8 &&
              c.allgather_bucket_size == 5e8 && c.stage3_prefetch_bucket_size == 5e7 &&
              c.stage3_param_persistence_threshold == 1e5 && c.offload_device == ZT_OFFLOAD_NONE &&
              c.offload_ratio == 1.0,
          "defaults_zero", "zero defaults wrong");
    CHECK(c.loss_scale == 0 && c.initial_scale_power == 16 && c.loss_scale_window == 1000 && c.hysteresis == 2 &&
              c.min_loss_scale == 1 && !c.bf16_enabled && !c.fp16_enabled && c.gradient_clipping == 0,
          "defaults_precision", "precision defaults wrong");
    CHECK(c.steps_per_print == 10 && c.eval_interval == 0 && c.eval_batches == 10 && c.sample_interval == 0 &&
              c.sample_tokens == 64 && c.seed == 1337 && c.device == ZT_DEVICE_AUTO && c.keep_last == 0 &&
              c.resume_mode == ZT_RESUME_AUTO && !c.checkpoint_dir,
          "defaults_misc", "logging/checkpoint defaults wrong");
    zt_config_free(&c);
    zt_config_free(&c); /* idempotent */

    int rc = load_text(&c, "none", NULL, NULL, 0, &err);
    CHECK(rc == 0 && c.effective_text && c.lr == 6e-4f, "load_no_file_gives_defaults", "rc %d: %s", rc, err.msg);
    zt_config_free(&c);

    /* ---- a full YAML file ---- */
    rc = load_text(&c, "full.yaml", full_yaml, NULL, 0, &err);
    CHECK(rc == 0, "full_yaml_loads", "%s", err.msg);
    if (rc == 0) {
        CHECK(c.n_layer == 4 && c.n_head == 4 && c.n_embd == 128 && c.n_positions == 256 && c.seq_len == 128 &&
                  !strcmp(c.train_glob, "data/tiny_train_*.bin") && !strcmp(c.val_glob, "data/tiny_val.bin"),
              "full_yaml_model_data", "model/data fields wrong");
        CHECK(c.train_micro_batch_size_per_gpu == 8 && c.gradient_accumulation_steps == 2 && c.micro_batch_given &&
                  c.grad_accum_given && c.train_batch_size == 0 && c.train_iters == 500,
              "full_yaml_batch", "batch fields wrong");
        CHECK(c.lr == 3e-4f && c.beta2 == 0.99f && c.weight_decay == 0.1f && c.decay_all_params &&
                  c.scheduler == ZT_SCHED_WARMUP_COSINE_LR && c.total_num_steps == 500 && c.warmup_num_steps == 50 &&
                  c.warmup_min_ratio == 0.1f && c.cos_min_ratio == 0.05f && c.warmup_type_log == 0,
              "full_yaml_optimizer_scheduler", "optimizer/scheduler fields wrong");
        CHECK(c.bf16_enabled && !c.fp16_enabled && c.gradient_clipping == 1.0f && c.zero_stage == 3 && c.overlap_comm &&
                  !c.contiguous_gradients && c.reduce_bucket_size == 2e8 && c.allgather_bucket_size == 3e8 &&
                  c.stage3_prefetch_bucket_size == 1e7 && c.stage3_param_persistence_threshold == 1e4 &&
                  c.offload_device == ZT_OFFLOAD_CPU && c.offload_ratio < 0 && c.offload_pin_memory &&
                  c.offload_device_memory == 40.0 * 1024 * 1024 * 1024,
              "full_yaml_precision_zero", "precision/zero fields wrong (device_memory %g)", c.offload_device_memory);
        CHECK(c.ckpt_enabled && c.ckpt_number_checkpoints == 2 && !strcmp(c.checkpoint_dir, "runs/ckpt") &&
                  c.save_interval == 100 && c.keep_last == 3 && c.resume_mode == ZT_RESUME_NEVER &&
                  c.steps_per_print == 5 && c.eval_interval == 50 && c.eval_batches == 4 && c.sample_interval == 250 &&
                  c.sample_tokens == 32 && !strcmp(c.metrics_file, "runs/metrics.jsonl") && c.wall_clock_breakdown &&
                  !strcmp(c.trace_file, "runs/trace.json") && c.seed == 42 && c.device == ZT_DEVICE_CPU,
              "full_yaml_rest", "checkpoint/logging fields wrong");

        /* effective text round trip */
        rc = load_text(&c2, "roundtrip.yaml", c.effective_text, NULL, 0, &err);
        const char *t1 = strchr(c.effective_text, '\n'), *t2 = rc == 0 ? strchr(c2.effective_text, '\n') : NULL;
        CHECK(rc == 0 && t2 && !strcmp(t1, t2) && c2.lr == c.lr && c2.offload_device_memory == c.offload_device_memory &&
                  c2.cos_min_ratio == c.cos_min_ratio && !strcmp(c2.train_glob, c.train_glob),
              "effective_text_round_trip_full", "rc %d %s\n--- first:\n%s--- second:\n%s", rc, err.msg,
              c.effective_text, rc == 0 ? c2.effective_text : "");
        if (rc == 0) zt_config_free(&c2);
    }
    zt_config_free(&c);

    /* ---- a DeepSpeed JSON config ---- */
    rc = load_text(&c, "ds_config.json", ds_json, NULL, 0, &err);
    CHECK(rc == 0, "deepspeed_json_loads", "%s", err.msg);
    if (rc == 0) {
        CHECK(c.train_batch_size == 32 && c.train_micro_batch_size_per_gpu == 4 && c.micro_batch_given &&
                  !c.grad_accum_given && c.steps_per_print == 100 && c.gradient_clipping == 1.0f,
              "deepspeed_json_batch", "batch fields wrong");
        CHECK(!strcmp(c.optimizer_type, "Adam") && c.lr == 1e-4f && c.beta1 == 0.8f && c.beta2 == 0.999f &&
                  c.weight_decay == 3e-7f && c.scheduler == ZT_SCHED_WARMUP_DECAY_LR && c.warmup_max_lr == 1e-4f &&
                  c.warmup_num_steps == 1000 && c.total_num_steps == 10000,
              "deepspeed_json_optimizer_scheduler", "optimizer/scheduler fields wrong");
        CHECK(c.fp16_enabled && c.loss_scale == 0 && c.initial_scale_power == 12 && c.loss_scale_window == 500 &&
                  c.zero_stage == 2 && c.overlap_comm && c.offload_device == ZT_OFFLOAD_CPU && c.offload_ratio == 1.0 &&
                  c.offload_pin_memory && c.ckpt_enabled && c.ckpt_number_checkpoints == 0,
              "deepspeed_json_fp16_zero_actckpt", "fp16/zero/activation fields wrong (ckpt_enabled %d)",
              c.ckpt_enabled);
        /* the batch rule on it: 32 = 4 * accumulation * 2 -> accumulation 4 */
        rc = zt_config_check_batch(&c, 2, &err);
        CHECK(rc == 0 && c.gradient_accumulation_steps == 4, "batch_derive_accumulation", "rc %d %s ga %d", rc, err.msg,
              c.gradient_accumulation_steps);
        rc = load_text(&c2, "roundtrip2.yaml", c.effective_text, NULL, 0, &err);
        int rc2 = rc == 0 ? zt_config_check_batch(&c2, 2, &err) : -1;
        CHECK(rc == 0 && rc2 == 0 && c2.train_batch_size == 32 && c2.gradient_accumulation_steps == 4 &&
                  !strcmp(strchr(c2.effective_text, '\n'), strchr(c.effective_text, '\n')),
              "effective_text_round_trip_after_batch", "rc %d/%d %s", rc, rc2, err.msg);
        if (rc == 0) zt_config_free(&c2);
    }
    zt_config_free(&c);

    /* ---- batch rule ---- */
    rc = load_text(&c, "tb.yaml", "train_batch_size: 64\n", NULL, 0, &err);
    rc = rc ? rc : zt_config_check_batch(&c, 4, &err);
    CHECK(rc == 0 && c.train_micro_batch_size_per_gpu == 16 && c.gradient_accumulation_steps == 1,
          "batch_derive_micro_from_total", "rc %d %s mb %d", rc, err.msg, c.train_micro_batch_size_per_gpu);
    zt_config_free(&c);
    rc = load_text(&c, "tb2.yaml", "train_batch_size: 64\ngradient_accumulation_steps: 4\n", NULL, 0, &err);
    rc = rc ? rc : zt_config_check_batch(&c, 2, &err);
    CHECK(rc == 0 && c.train_micro_batch_size_per_gpu == 8, "batch_derive_micro_with_accumulation", "rc %d %s mb %d",
          rc, err.msg, c.train_micro_batch_size_per_gpu);
    zt_config_free(&c);
    rc = load_text(&c, "tb3.yaml", "train_micro_batch_size_per_gpu: 3\ngradient_accumulation_steps: 5\n", NULL, 0, &err);
    rc = rc ? rc : zt_config_check_batch(&c, 2, &err);
    CHECK(rc == 0 && c.train_batch_size == 30, "batch_derive_total", "rc %d %s tb %ld", rc, err.msg, c.train_batch_size);
    zt_config_free(&c);
    rc = load_text(&c, "tb4.yaml",
                   "train_batch_size: 32\ntrain_micro_batch_size_per_gpu: 4\ngradient_accumulation_steps: 2\n", NULL, 0,
                   &err);
    rc = rc ? rc : zt_config_check_batch(&c, 2, &err);
    CHECK(rc != 0 && !strcmp(err.msg, "train_batch_size 32 != train_micro_batch_size_per_gpu 4 * "
                                      "gradient_accumulation_steps 2 * world size 2 (= 16)"),
          "batch_mismatch_names_all_numbers", "rc %d: %s", rc, err.msg);
    zt_config_free(&c);

    /* ---- errors: positions and messages ---- */
    expect_error("error_unknown_key_suggests", "e1.yaml", "model:\n  n_layer: 2\nzero_optimisation:\n  stage: 1\n",
                 "3:1: unknown key 'zero_optimisation' (did you mean 'zero_optimization'?)");
    expect_error("error_unknown_nested_key_suggests", "e2.yaml", "optimizer:\n  params:\n    lr: 1e-3\n    betass: [0.9, 0.9]\n",
                 "4:5: unknown key 'betass' in optimizer.params (did you mean 'betas'?)");
    expect_error("error_unknown_key_no_suggestion", "e3.yaml", "banana: 1\n", "1:1: unknown key 'banana'");
    expect_error("error_wrong_type_string_for_int", "e4.yaml", "model:\n  n_layer: twelve\n",
                 "2:12: model.n_layer: expected an integer >= 1, got string 'twelve'");
    expect_error("error_wrong_type_list_for_mapping", "e5.yaml", "zero_optimization: [1, 2]\n",
                 "1:20: zero_optimization: expected a mapping, got a list");
    expect_error("error_wrong_type_quoted_number", "e6.json", "{\"train_iters\": \"100\"}\n",
                 "1:17: train_iters: expected an integer >= 1, got string '100'");
    expect_error("error_negative_lr", "e7.yaml", "optimizer:\n  params:\n    lr: -0.001\n",
                 "3:9: optimizer.params.lr: expected a number >= 0, got -0.001");
    expect_error("error_stage_4", "e8.yaml", "zero_optimization:\n  stage: 4\n",
                 "2:10: zero_optimization.stage: expected an integer in [0, 3], got 4");
    expect_error("error_seq_len_over_n_positions", "e9.yaml", "model:\n  n_positions: 128\ndata:\n  seq_len: 256\n",
                 "4:12: data.seq_len: expected <= model.n_positions (128), got 256");
    expect_error("error_n_embd_not_multiple_of_n_head", "e10.yaml", "model:\n  n_head: 12\n  n_embd: 100\n",
                 "3:11: model.n_embd: expected a multiple of model.n_head (12), got 100");
    expect_error("error_ratio_out_of_range", "e11.yaml",
                 "zero_optimization:\n  offload_optimizer:\n    device: cpu\n    ratio: 1.5\n",
                 "4:12: zero_optimization.offload_optimizer.ratio: expected a number in [0, 1] or \"auto\", got 1.5");
    expect_error("error_unknown_scheduler_type", "e12.yaml", "scheduler:\n  type: WarmupDecay\n",
                 "2:9: scheduler.type: expected WarmupLR, WarmupDecayLR or WarmupCosineLR, got string 'WarmupDecay' "
                 "(did you mean 'WarmupDecayLR'?)");
    expect_error("error_unknown_device", "e13.yaml", "device: tpu\n",
                 "1:9: device: expected auto, cpu, cuda or sim, got string 'tpu' (did you mean 'cpu'?)");
    expect_error("error_duplicate_key", "e14.yaml", "optimizer:\n  params:\n    lr: 1e-3\n    lr: 2e-3\n",
                 "4:5: duplicate key 'lr' in optimizer.params (first at line 3)");
    expect_error("error_yaml_syntax", "e15.yaml", "model:\n  n_layer: [1, 2\n  n_head: 3\n",
                 "3:9: did not find expected ',' or ']' (while parsing a flow sequence that starts at 2:12)");
    expect_error("error_deepspeed_key_unsupported", "e16.json", "{\"zero_optimization\": {\"stage\": 3,\n"
                 "  \"zero_quantized_weights\": true}}\n",
                 "2:3: zero_optimization.zero_quantized_weights is a DeepSpeed key zerotrain does not support");
    expect_error("error_offload_param_below_stage3", "e17.yaml", "zero_optimization:\n  offload_param:\n    device: cpu\n",
                 "3:13: zero_optimization.offload_param.device: parameter offload needs zero_optimization.stage 3 (it "
                 "is 0): only stage 3 partitions the parameters");
    expect_error("error_offload_param_nvme_no_path", "e17b.yaml",
                 "zero_optimization:\n  stage: 3\n  offload_param: {device: nvme}\n",
                 "3:27: zero_optimization.offload_param.device: device nvme needs zero_optimization.offload_param.nvme_path "
                 "(a directory on the NVMe drive for the parameter swap files)");
    expect_error("error_l2_adam", "e19.yaml",
                 "optimizer:\n  type: Adam\n  params:\n    weight_decay: 0.01\n    adam_w_mode: false\n",
                 "5:18: optimizer.params.adam_w_mode: adam_w_mode false with weight_decay 0.01 asks for L2-coupled "
                 "Adam, which zerotrain does not support (use adam_w_mode true or type AdamW for decoupled weight "
                 "decay, or weight_decay 0)");
    expect_error("error_bf16_and_fp16", "e20.yaml", "bf16: {enabled: true}\nfp16: {enabled: true}\n",
                 "2:17: fp16.enabled: bf16 and fp16 cannot both be enabled");
    expect_error("error_scheduler_param_of_other_type", "e21.yaml",
                 "scheduler:\n  type: WarmupLR\n  params:\n    cos_min_ratio: 0.1\n",
                 "4:20: scheduler.params.cos_min_ratio: not a parameter of WarmupLR (it takes warmup_min_lr, "
                 "warmup_max_lr, warmup_num_steps, warmup_type)");
    expect_error("error_top_level_not_mapping", "e22.yaml", "- a\n- b\n",
                 "1:1: expected a mapping of config keys at the top level, got a list");

    /* ---- --set overrides ---- */
    {
        char *ov[] = {"optimizer.params.lr=3e-4", "optimizer.params.betas=[0.9,0.99]", "zero_optimization.stage=2",
                      "zero_optimization.offload_optimizer={device: cpu, ratio: 0.25}", "data.train=data/*.bin",
                      "scheduler.type=WarmupLR", "activation_checkpointing.number_checkpoints=3", "checkpoint.dir="};
        rc = load_text(&c, "base.yaml", "checkpoint:\n  dir: runs/x\noptimizer:\n  params:\n    lr: 1e-3\n", ov, 8, &err);
        CHECK(rc == 0 && c.lr == 3e-4f && c.beta1 == 0.9f && c.beta2 == 0.99f && c.zero_stage == 2 &&
                  c.offload_device == ZT_OFFLOAD_CPU && c.offload_ratio == 0.25 && !strcmp(c.train_glob, "data/*.bin") &&
                  c.scheduler == ZT_SCHED_WARMUP_LR && c.warmup_max_lr == 3e-4f && c.ckpt_enabled &&
                  c.ckpt_number_checkpoints == 3 && !c.checkpoint_dir,
              "override_nested_lists_and_maps", "rc %d: %s", rc, err.msg);
        zt_config_free(&c);
    }
    {
        char *ov[] = {"zero_optimisation.stage=1"};
        expect_override_error("override_unknown_key_suggests", ov, 1,
                              "--set zero_optimisation.stage: unknown key 'zero_optimisation' (did you mean "
                              "'zero_optimization'?)");
    }
    {
        char *ov[] = {"optimizer.params.lrr=1"};
        expect_override_error("override_unknown_nested_key_suggests", ov, 1,
                              "--set optimizer.params.lrr: unknown key 'lrr' in optimizer.params (did you mean 'lr'?)");
    }
    {
        char *ov[] = {"optimizer.params.lr=-1"};
        expect_override_error("override_out_of_range", ov, 1, "--set optimizer.params.lr: expected a number >= 0, got -1");
    }
    {
        char *ov[] = {"optimizer.params.betas=[0.9]"};
        expect_override_error("override_wrong_list", ov, 1,
                              "--set optimizer.params.betas: expected a list of two numbers [beta1, beta2], got a list");
    }
    {
        char *ov[] = {"optimizer={params: {lr: 1e-3, eps: 0}}"};
        expect_override_error("override_mapping_value_error", ov, 1,
                              "--set optimizer: optimizer.params.eps: expected a number > 0, got 0");
    }
    {
        char *ov[] = {"train_iters.x=1"};
        expect_override_error("override_not_a_section", ov, 1, "--set train_iters.x: train_iters is a value, not a section");
    }
    {
        char *ov[] = {"data.seq_len=2048"};
        expect_override_error("override_cross_check", ov, 1,
                              "--set data.seq_len: expected <= model.n_positions (1024), got 2048");
    }
    {
        char *ov[] = {"train_iters"};
        expect_override_error("override_needs_equals", ov, 1,
                              "--set train_iters: expected KEY=VALUE (e.g. optimizer.params.lr=3e-4)");
    }

    /* ---- odds and ends ---- */
    rc = load_text(&c, "sched.yaml", "optimizer: {params: {lr: 0.002}}\nscheduler:\n  type: WarmupDecayLR\n", NULL, 0,
                   &err);
    CHECK(rc == 0 && c.warmup_max_lr == 0.002f && c.total_num_steps == 0 && c.warmup_type_log == 1,
          "warmup_max_lr_defaults_to_lr", "rc %d %s max %g", rc, err.msg, (double)c.warmup_max_lr);
    zt_config_free(&c);
    expect_error("error_scheduler_without_type", "e23.yaml", "scheduler:\n  params:\n    warmup_num_steps: 10\n",
                 "2:3: scheduler: type is required (WarmupLR, WarmupDecayLR or WarmupCosineLR)");
    rc = load_text(&c, "bytes.yaml", "zero_optimization:\n  offload_optimizer: {device: cpu, device_memory: \"1.5 GB\"}\n",
                   NULL, 0, &err);
    CHECK(rc == 0 && c.offload_device_memory == 1.5e9, "device_memory_units", "rc %d %s %g", rc, err.msg,
          c.offload_device_memory);
    zt_config_free(&c);
    rc = load_text(&c, "resume.yaml", "checkpoint: {resume: runs/ckpt/step_100}\n", NULL, 0, &err);
    CHECK(rc == 0 && c.resume_mode == ZT_RESUME_PATH && !strcmp(c.resume_path, "runs/ckpt/step_100"),
          "resume_path", "rc %d %s", rc, err.msg);
    zt_config_free(&c);
    rc = load_text(&c, "empty.yaml", "# nothing\n", NULL, 0, &err);
    CHECK(rc == 0 && c.n_layer == 12, "empty_file_gives_defaults", "rc %d %s", rc, err.msg);
    zt_config_free(&c);

    /* ---- DeepSpeed configs from the wild ---- */
    rc = load_text(&c, "ds_wild.json",
                   "{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": \"auto\",\n"
                   " \"model\": {\"n_embd\": 64, \"n_head\": 4},\n"
                   " \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": \"auto\", \"betas\": \"auto\",\n"
                   "   \"amsgrad\": false, \"bias_correction\": false}},\n"
                   " \"bfloat16\": {\"enabled\": true}, \"amp\": {\"enabled\": false, \"opt_level\": \"O1\"},\n"
                   " \"zero_optimization\": {\"stage\": 3, \"cpu_offload\": true, \"reduce_bucket_size\": \"auto\",\n"
                   "   \"stage3_prefetch_bucket_size\": \"auto\", \"stage3_param_persistence_threshold\": \"auto\",\n"
                   "   \"sub_group_size\": 1e8, \"offload_param\": {\"device\": \"none\", \"buffer_count\": 6}},\n"
                   " \"aio\": {\"queue_depth\": 16}, \"memory_breakdown\": true, \"cuda_visible_devices\": \"0\"}\n",
                   NULL, 0, &err);
    CHECK(rc == 0, "ds_wild_loads", "%s", err.msg);
    if (rc == 0) {
        CHECK(c.train_batch_size == 0 && !c.micro_batch_given && c.train_micro_batch_size_per_gpu == 4 &&
                  c.lr == 6e-4f && c.beta1 == 0.9f && c.beta2 == 0.95f && !c.bias_correction && c.bf16_enabled &&
                  c.offload_device == ZT_OFFLOAD_CPU && c.reduce_bucket_size == 64.0 * 64 &&
                  c.stage3_prefetch_bucket_size == floor(0.9 * 64 * 64) && c.stage3_param_persistence_threshold == 640 &&
                  c.sub_group_size == 1e8 && c.offload_param_buffer_count == 6 && c.aio_queue_depth == 16 &&
                  c.memory_breakdown && c.auto_keys && strstr(c.auto_keys, "optimizer.params.betas"),
              "ds_wild_values", "auto_keys [%s] reduce %g", c.auto_keys ? c.auto_keys : "", c.reduce_bucket_size);
        rc = load_text(&c2, "ds_wild_rt.yaml", c.effective_text, NULL, 0, &err);
        CHECK(rc == 0 && !strcmp(strchr(c2.effective_text, '\n'), strchr(c.effective_text, '\n')) &&
                  !c2.auto_keys,
              "ds_wild_effective_text_round_trip", "rc %d %s", rc, err.msg);
        if (rc == 0) zt_config_free(&c2);
    }
    zt_config_free(&c);
    expect_error("error_amsgrad_true", "e24.yaml", "optimizer:\n  params: {amsgrad: true}\n",
                 "2:21: optimizer.params.amsgrad: true is not supported by zerotrain (only false) (AMSGrad)");
    expect_error("error_auto_not_derivable", "e25.yaml", "seed: auto\n",
                 "1:7: seed: expected an integer >= 0, got string 'auto'");
    {
        char *ov[] = {"curriculum_learning.enabled=true"};
        expect_override_error("override_off_section_enabled", ov, 1,
                              "--set curriculum_learning.enabled: true is not supported by zerotrain (curriculum "
                              "learning is not implemented)");
    }
    {
        double b = 0;
        int ok = zt_parse_bytes("80G", &b) == 0 && b == 80.0 * 1073741824.0;
        ok = ok && zt_parse_bytes("512 MB", &b) == 0 && b == 512e6;
        ok = ok && zt_parse_bytes("1.5GiB", &b) == 0 && b == 1.5 * 1073741824.0;
        ok = ok && zt_parse_bytes("2k", &b) == 0 && b == 2048 && zt_parse_bytes("7", &b) == 0 && b == 7;
        ok = ok && zt_parse_bytes("12 parsecs", &b) != 0 && zt_parse_bytes("-1GB", &b) != 0 && zt_parse_bytes("", &b) != 0;
        CHECK(ok, "bytes_parser_units", "last value %g", b);
    }

    /* clean up */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return zt_check_exit();
}
