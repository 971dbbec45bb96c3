# zerotrain — build, test and bench.
#   make            build ./zerotrain (with the CUDA backend, libzerotrain-cuda.so beside it, when nvcc is
#                   found; CUDA=0 leaves it out)
#   make test       build and run the whole test suite (ends with "N passed, N failed")
#   make bench      run the benchmarks (timing lives here, never in tests)
#   make demo       tokenize the bundled corpus, train the demo model, print a sample
#   make sanitize   build the commands with AddressSanitizer + UBSan (build/sanitize/zerotrain) and run
#                   every subcommand over its test inputs (test/t_sanitize.sh; part of make test)
#   make gpu-check  pack ./zerotrain and its runtime into build/gpu-check for a bare GPU machine,
#                   whose build/gpu-check/run checks the whole GPU path there (docs/gpus.md: GPU check)
#   make MARCH=native   tune the C code for the build machine (the default, x86-64-v2, runs on
#                   any x86-64 CPU of the last 15 years: a binary built on a cluster's login node
#                   runs on its compute nodes; OpenBLAS's kernels (re-chosen by src/backend/
#                   blas_core.c when the library falls back) and the CPU Adam's SIMD path are picked
#                   at run time either way). OPT=... sets the optimization flags, CFLAGS=... adds.

CC      := mpicc
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA    ?= $(if $(NVCC),1,0)
BUILD   ?= build
BIN     ?= zerotrain

OPT     ?= -O3
MARCH   ?= x86-64-v2
HDF5_CFLAGS := $(shell pkg-config --cflags hdf5-serial 2>/dev/null)
HDF5_LIBS   := $(shell pkg-config --libs hdf5-serial 2>/dev/null || echo -lhdf5)
# the project's own flags live in ZT_CFLAGS so that `make CFLAGS=...` adds to them, never replaces them
ZT_CFLAGS := $(OPT) -march=$(MARCH) -Isrc -std=gnu11 -fopenmp -Wall -Wextra -Werror -Wno-unused-parameter -MMD -MP \
             $(HDF5_CFLAGS) $(CFLAGS)
LDLIBS  := -lopenblas -lyaml -lpcre2-8 -lutf8proc -luring -lm $(HDF5_LIBS)

# src/<part>/: the library every program links (engine, model, backend, comm, io, config, util);
# src/cmd/: the commands, and src/selftest/: the selftest's harness (a floor below the commands),
# linked into ./zerotrain only. Includes are written from src/: "io/hf.h".
LIB_SRCS := $(filter-out src/cmd/% src/selftest/% src/backend/backend_cuda_absent.c src/backend/backend_cuda_loader.c src/comm/comm_nccl_loader.c src/comm/comm_nccl_absent.c,$(wildcard src/*/*.c))
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o)
CMD_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(wildcard src/cmd/*.c src/selftest/*.c))

ifeq ($(CUDA),1)
CUDA_HOME   ?= $(patsubst %/bin/nvcc,%,$(NVCC))
NVCCFLAGS   ?= -O3 -std=c++17 -Isrc -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90 \
               -Xcompiler -Wall,-Wextra,-Wno-unused-parameter,-fPIC -Werror all-warnings -ccbin g++
# the kernels are written once for a 16-bit type and compiled twice: bf16 and fp16 (cuda_common.cuh)
CUDA_DTYPE_SRCS := cuda/kernels.cu cuda/gemm.cu cuda/attention.cu cuda/llama_kernels.cu
CUDA_SRCS   := $(filter-out $(CUDA_DTYPE_SRCS),$(wildcard cuda/*.cu))
BACKEND_OBJS := $(CUDA_SRCS:%.cu=$(BUILD)/%.o) $(CUDA_DTYPE_SRCS:%.cu=$(BUILD)/%.bf16.o) \
                $(CUDA_DTYPE_SRCS:%.cu=$(BUILD)/%.f16.o)
# NCCL is not linked: cuda/comm_nccl.cu loads it at run time (a GPU machine without it still runs)
CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart -ldl -lstdc++
# ./zerotrain loads cuda/ as libzerotrain-cuda.so (src/backend/backend_cuda_loader.c, and
# src/comm/comm_nccl_loader.c for its NCCL comm: a command that needs no GPU maps none of CUDA's
# libraries); the test programs link cuda/ in
CUDA_LIB    := libzerotrain-cuda.so
ZT_BACKEND_OBJS := $(BUILD)/src/backend/backend_cuda_loader.o $(BUILD)/src/comm/comm_nccl_loader.o
TEST_LDLIBS := $(LDLIBS) $(CUDA_LDLIBS)
else
BACKEND_OBJS := $(BUILD)/src/backend/backend_cuda_absent.o $(BUILD)/src/comm/comm_nccl_absent.o
ZT_BACKEND_OBJS := $(BACKEND_OBJS)
TEST_LDLIBS := $(LDLIBS)
endif

# objects depend on a stamp named after the flags, so changing MARCH or OPT rebuilds them
FLAGS_STAMP := $(BUILD)/flags.$(shell echo '$(ZT_CFLAGS) $(NVCCFLAGS)' | md5sum | cut -c1-8)
$(FLAGS_STAMP):
	@mkdir -p $(BUILD) && rm -f $(BUILD)/flags.* && touch $@

TEST_SRCS := $(wildcard test/test_*.c)
TEST_BINS := $(TEST_SRCS:test/%.c=$(BUILD)/test/%)
BENCH_SRCS := $(wildcard test/bench_*.c)
BENCH_BINS := $(BENCH_SRCS:test/%.c=$(BUILD)/test/%)

.PHONY: all test bench demo gpu-check soak clean sanitize
.DEFAULT_GOAL := all
all: $(BIN) $(TEST_BINS) $(BENCH_BINS)

# -rdynamic: the CUDA library finds the rest of zerotrain (errors, the watchdog) in the binary
$(BIN): $(CMD_OBJS) $(LIB_OBJS) $(ZT_BACKEND_OBJS) | $(CUDA_LIB)
	$(CC) $(ZT_CFLAGS) -rdynamic -o $@ $(CMD_OBJS) $(LIB_OBJS) $(ZT_BACKEND_OBJS) $(LDLIBS) -ldl

# -Bsymbolic: the library's own calls of its entry points stay inside it (the binary defines the
# same names, as the loader)
$(CUDA_LIB): $(BACKEND_OBJS)
	$(CC) -shared -Wl,-Bsymbolic -o $@ $^ $(CUDA_LDLIBS)

$(BUILD)/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ZT_CFLAGS) -c -o $@ $<

$(BUILD)/cuda/%.o: cuda/%.cu $(wildcard cuda/*.cuh) src/backend/opmath.h src/backend/backend.h $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/cuda/%.bf16.o: cuda/%.cu $(wildcard cuda/*.cuh) src/backend/opmath.h src/backend/backend.h $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -DZT_CU_FP16=0 -c -o $@ $<

$(BUILD)/cuda/%.f16.o: cuda/%.cu $(wildcard cuda/*.cuh) src/backend/opmath.h src/backend/backend.h $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -DZT_CU_FP16=1 -c -o $@ $<

$(BUILD)/test/%: test/%.c $(LIB_OBJS) $(BACKEND_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(ZT_CFLAGS) -o $@ $(filter %.c %.o,$^) $(TEST_LDLIBS)

test: all
	@test/run.sh

bench: all
	@test/bench.sh

# the long fault soak (as root): SOAK_SECONDS of seeded faults, SOAK_SEED to replay a schedule,
# SOAK_ARGS=--slurm for the Slurm variant
SOAK_SECONDS ?= 1800
SOAK_SEED ?= 1
soak: all
	@scripts/soak --seconds $(SOAK_SECONDS) --seed $(SOAK_SEED) $(SOAK_ARGS)

# the demo needs ./zerotrain alone: not the test and bench programs, nor the CUDA library (loaded only
# when a command asks for a GPU; a later `make` builds it beside the same binary)
demo:
	@$(MAKE) --no-print-directory CUDA_LIB= $(BIN)
	@scripts/demo.sh

# the commands under AddressSanitizer and UBSan (test/t_sanitize.sh: its own build in build/sanitize,
# the CPU backend only, then every subcommand over its test inputs); `make test` runs it too
sanitize: all
	@test/run.sh sanitize

gpu-check: zerotrain
	@scripts/gpu-check pack build/gpu-check

clean:
	rm -rf $(BUILD) zerotrain libzerotrain-cuda.so

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
