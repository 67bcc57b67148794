# radixmlp: `make` builds radixmlp, test_radixmlp and bench; `make run` runs the demo; `make test` builds all three,
# runs the resource gate (`make resource-gate`: registers, spills, shared memory per kernel; no GPU), the docs check,
# the exercises' grader and the tests. `make help` lists every target.
# `make gpu-check`, on a machine with a GPU: every check that needs one, into docs/gpu-report-<device>-<date>.md.
# `make test-asan`, `make test-valgrind` and `make fuzz` (FUZZ_SECONDS=60 per target) check the host half with clang.
# Needs the CUDA toolkit (nvcc, cuBLAS) to build; a GPU only to run the CUDA path (everything else runs on the CPU).
CUDA_HOME ?= /usr/local/cuda
NVCC      := $(CUDA_HOME)/bin/nvcc
CUDA_ARCH ?= 80 90
CC        ?= gcc

comma     := ,
space     := $() $()
# The clang-only goals (sanitizers, fuzzers) and clean need no CUDA toolkit.
HOST_GOALS := clean test-asan test-valgrind fuzz build/% help grade grade-all
ifeq ($(and $(MAKECMDGOALS),$(if $(filter-out $(HOST_GOALS),$(MAKECMDGOALS)),,host)),)
ifeq ($(wildcard $(NVCC)),)
  $(error nvcc not found at $(NVCC): install the CUDA toolkit or run `make CUDA_HOME=/path/to/cuda`)
endif
  $(info radixmlp: nvcc $(shell $(NVCC) --version | sed -n 's/.*release \([0-9.]*\).*/\1/p') at $(NVCC); building for sm_$(subst $(space),$(comma) sm_,$(strip $(CUDA_ARCH))) + PTX compute_$(lastword $(CUDA_ARCH)) (override with CUDA_ARCH="...")$(if $(shell command -v nvidia-smi 2>/dev/null),, ; no nvidia-smi here: GPU tests will report themselves skipped))
endif
GENCODE   := $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(a),code=sm_$(a)) \
             -gencode arch=compute_$(lastword $(CUDA_ARCH)),code=compute_$(lastword $(CUDA_ARCH))
CFLAGS    ?= -O2
CFLAGS    += -std=c99 -Wall -Wextra -Werror=implicit-function-declaration -D_DEFAULT_SOURCE
# The C reference runs its loops on every core with OpenMP (OMP_NUM_THREADS=n to choose) and must give the same bits
# on any build: its matmul is an explicit chain of FMAs (fmaf, or the AVX2 instruction chosen at run time), and
# -ffp-contract=off on every line keeps any compiler from fusing any other a * b + c into an FMA in one loop and not
# in another (radixmlp.cu, "the plain-c reference forward"). nvcc passes the matmul's `#pragma GCC unroll` on to
# gcc but warns that it does not know it itself (1675): silenced.
OMP       := -fopenmp
NVFLAGS   := -std=c++17 -O2 $(GENCODE) -Xcompiler -Wall,-Wextra,-ffp-contract=off,$(OMP) -Wno-deprecated-gpu-targets \
             -diag-suppress 1675
LDLIBS    := -L$(CUDA_HOME)/lib64 -Xlinker -rpath=$(CUDA_HOME)/lib64 -Xcompiler $(OMP) -lcublas -lm

all: radixmlp test_radixmlp bench

radixmlp: radixmlp.cu radixmlp.h
	$(NVCC) $(NVFLAGS) -o $@ radixmlp.cu $(LDLIBS)

radixmlp_lib.o: radixmlp.cu radixmlp.h
	$(NVCC) $(NVFLAGS) -DRADIXMLP_NO_MAIN -c -o $@ radixmlp.cu

%.o: %.c radixmlp.h
	$(CC) $(CFLAGS) -c -o $@ $<

test_radixmlp: test_radixmlp.o radixmlp_lib.o
	$(NVCC) $(GENCODE) -o $@ $^ $(LDLIBS)

bench: bench.o radixmlp_lib.o
	$(NVCC) $(GENCODE) -o $@ $^ $(LDLIBS)

run: radixmlp
	./radixmlp

# `make test`: the docs check, the grader on every right answer of docs/answers/ (each must pass its check, and this
# tree without it fail; each object compiled once: .ci/grade says how), beside the tests, which
# also run ./radixmlp (cli group) and ./bench (bench group). Each fails the target when anything drifts. The wrong
# answers, the checks' own tests, run in `make grade-all` (.ci/run runs it): they test the graders, not the code, and
# would double the grader's time, which would put `make test` past 3 minutes on 2 cores.
# The grader runs on one core beside the tests (most of the tests' time is their programs' start-up, not CPU), into
# build/grade.log; its summary follows the tests', and the suite's closing line is printed again last.
test: all resource-gate
	.ci/docs-check
	@mkdir -p build
	@echo ".ci/grade --suite --right > build/grade.log &   # beside the tests, on one core"
	@GRADE_JOBS=1 .ci/grade --suite --right > build/grade.log 2>&1 & grader=$$!; \
	{ ./test_radixmlp; echo $$? > build/test.rc; } | tee build/test.log; \
	wait $$grader; graded=$$?; \
	if [ $$graded -ne 0 ]; then grep -B2 -A12 'FAIL' build/grade.log | head -60; fi; \
	tail -1 build/grade.log; tail -1 build/test.log; \
	[ $$graded -eq 0 ] && [ "$$(cat build/test.rc)" = 0 ]

# Every command the docs show that needs no GPU, run and compared with the output they quote, and every name they cite
# checked against the code (.ci/docs-check says how the docs mark their commands); with the check's own tests
# (.ci/docs-check-test). Writes only under /tmp.
docs-check: all
	.ci/docs-check

# The exercises' grader (docs/exercises.md; no CUDA toolkit needed, clang): `make grade EX=9` checks exercise 9 on this
# tree, `make grade EX=9 ANSWER=1` on a copy with the reference answer docs/answers/09.patch applied; `make grade-all`
# runs every answer of docs/answers/ through its check: the right ones must pass, the wrong ones and this tree fail.
grade:
	@test -n "$(EX)" || { echo "make grade EX=N [ANSWER=1]: N is an exercise with docs/answers/N.check:"; \
	    ls docs/answers/*.check | sed 's|.*/||; s|\.check||' | tr '\n' ' '; echo; exit 2; }
	.ci/grade $(EX) $(if $(ANSWER),--answer)
grade-all:
	.ci/grade --suite

# Every target, one line each.
help:
	@echo "make              build radixmlp (demo and CLI), test_radixmlp (tests) and bench (the paper's tables)"
	@echo "make run          build radixmlp and run the demo (no GPU needed)"
	@echo "make test         build all, then the resource gate, the docs check, the grader's right answers and the tests"
	@echo "make docs-check   run the docs' commands and compare their quoted output; check every name they cite"
	@echo "make grade EX=N   grade exercise N on this tree (ANSWER=1: on a copy with docs/answers/N.patch)"
	@echo "make grade-all    every right answer passes its check; every wrong one, and this tree, fail"
	@echo "make resource-gate  registers, spills and shared memory of every kernel (no GPU)"
	@echo "make gpu-check    on a machine with a GPU: every check that needs one, into a dated report"
	@echo "make test-asan    every host test under AddressSanitizer + UBSan (clang, no CUDA)"
	@echo "make test-valgrind  the loader tests under valgrind"
	@echo "make fuzz         libFuzzer on the parsers and the trie (FUZZ_SECONDS=60 per target)"
	@echo "make clean        remove what the build made"
	@echo "./test_radixmlp --list  every test as group/name; ./test_radixmlp GROUP|NAME ... runs those"

# Registers, spills, local and shared memory and CTAs per SM of every kernel for sm_80 and sm_90, from one compile with
# ptxas's report (no GPU needed); fails on any warning, spill, local memory or launch/kernel shared-memory mismatch.
# Reruns only when radixmlp.cu, radixmlp.h or the script change; otherwise prints its last (passing) table.
resource-gate: build/gate/table.txt
	@cat build/gate/table.txt
build/gate/table.txt: radixmlp.cu radixmlp.h .ci/resource-gate
	@mkdir -p build/gate
	@NVCC="$(NVCC)" NVFLAGS="$(filter-out $(GENCODE),$(NVFLAGS))" LDLIBS="$(LDLIBS)" CC="$(CC)" CFLAGS="$(CFLAGS)" \
	    .ci/resource-gate > build/gate/run.txt || { cat build/gate/run.txt; exit 1; }
	@mv build/gate/run.txt $@

# The checks that need a GPU, in one command, on a machine with one (.ci/gpu-check says which): writes
# docs/gpu-report-<device>-<date>.md. Without a GPU it says so in one line and fails.
gpu-check: all
	CUDA_HOME=$(CUDA_HOME) .ci/gpu-check

# ---- host-only checks with clang, no CUDA needed: sanitizers, valgrind, libFuzzer (see docs/fuzzing.md)
# radixmlp.cu is compiled as C++ with -DRADIXMLP_HOST_ONLY: the host half alone, the GPU entry points fail cleanly
# (GPU tests report themselves skipped). Without main() or the CUDA half some static helpers go unused: hence
# -Wno-unused-function for the host-only objects. Outputs go to build/.
CLANG        ?= clang
CLANGXX      ?= clang++
SAN          := -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
HOST_CU      := -x c++ -std=c++17 -Wall -Wextra -Wno-unused-function -ffp-contract=off -DRADIXMLP_HOST_ONLY
HOST_C       := -x c -std=c99 -Wall -Wextra -D_DEFAULT_SOURCE
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := safetensors config shard_index radix_index forward serve
FUZZ_FLAGS   := -timeout=10 -print_final_stats=1 -artifact_prefix=build/

build/radixmlp_asan: radixmlp.cu radixmlp.h
	@mkdir -p build
	$(CLANGXX) $(HOST_CU) $(OMP) $(SAN) -o $@ radixmlp.cu -lm

build/test_radixmlp_asan: test_radixmlp.c radixmlp.cu radixmlp.h
	@mkdir -p build
	$(CLANGXX) $(HOST_CU) $(OMP) $(SAN) -DRADIXMLP_NO_MAIN -c -o build/radixmlp_lib_asan.o radixmlp.cu
	$(CLANGXX) $(HOST_C) $(OMP) $(SAN) -o $@ test_radixmlp.c -x none build/radixmlp_lib_asan.o -lm

# Every host test under AddressSanitizer + UndefinedBehaviorSanitizer (leaks included); the CLI tests run the
# sanitized host-only CLI.
test-asan: build/test_radixmlp_asan build/radixmlp_asan
	RADIXMLP_CLI=build/radixmlp_asan build/test_radixmlp_asan

# The loader tests, the broken-checkpoint corpus among them, under valgrind memcheck: no invalid access, no leak.
# On the host-only build, without sanitizers (DWARF 4: valgrind 3.19 cannot read clang 14's DWARF 5): the CUDA
# runtime's own dlopen of the driver is not what we check. Without OpenMP (its thread pool is not what we check
# either): this is also the build that proves the reference compiles and runs single-threaded, as the emulator's.
build/test_radixmlp_host: test_radixmlp.c radixmlp.cu radixmlp.h
	@mkdir -p build
	$(CLANGXX) $(HOST_CU) -gdwarf-4 -O1 -DRADIXMLP_NO_MAIN -c -o build/radixmlp_lib_host.o radixmlp.cu
	$(CLANGXX) $(HOST_C) -gdwarf-4 -O1 -o $@ test_radixmlp.c -x none build/radixmlp_lib_host.o -lm

test-valgrind: build/test_radixmlp_host
	valgrind -q --leak-check=full --errors-for-leak-kinds=all --error-exitcode=1 build/test_radixmlp_host loader

# One libFuzzer binary per entry point of test_radixmlp.c (RADIXMLP_FUZZ=1..6).
build/fuzz_safetensors: FUZZ_ID := 1
build/fuzz_config: FUZZ_ID := 2
build/fuzz_shard_index: FUZZ_ID := 3
build/fuzz_radix_index: FUZZ_ID := 4
build/fuzz_forward: FUZZ_ID := 5
build/fuzz_serve: FUZZ_ID := 6
build/radixmlp_lib_fuzz.o: radixmlp.cu radixmlp.h
	@mkdir -p build
	$(CLANGXX) $(HOST_CU) $(OMP) $(SAN) -fsanitize=fuzzer-no-link -DRADIXMLP_NO_MAIN -c -o $@ radixmlp.cu
build/fuzz_%: test_radixmlp.c radixmlp.h build/radixmlp_lib_fuzz.o     # the test table goes unused without main()
	$(CLANGXX) $(HOST_C) -Wno-unused-const-variable $(OMP) $(SAN) -fsanitize=fuzzer -DRADIXMLP_FUZZ=$(FUZZ_ID) \
	    -o $@ test_radixmlp.c -x none build/radixmlp_lib_fuzz.o -lm

# Each target for FUZZ_SECONDS, from the committed seeds (fixtures/fuzz/<target>, read-only) into a working corpus
# build/corpus/<target>; a crash or hang stops make and leaves its input in build/.
fuzz: $(FUZZ_TARGETS:%=build/fuzz_%)
	@for t in $(FUZZ_TARGETS); do \
	    mkdir -p build/corpus/$$t; \
	    dict=; case $$t in safetensors|config|shard_index) dict=-dict=fixtures/fuzz/json.dict;; esac; \
	    echo "fuzz: $$t for $(FUZZ_SECONDS) s"; \
	    build/fuzz_$$t $(FUZZ_FLAGS) $$dict -max_total_time=$(FUZZ_SECONDS) build/corpus/$$t fixtures/fuzz/$$t \
	        2>build/fuzz_$$t.log || { tail -40 build/fuzz_$$t.log; exit 1; }; \
	    grep -E '^#[0-9]+.*DONE|stat::number_of_executed_units|stat::peak_rss' build/fuzz_$$t.log | tail -3; \
	done

clean:
	rm -f radixmlp test_radixmlp bench *.o
	rm -rf build

.PHONY: all run test docs-check grade grade-all help resource-gate gpu-check test-asan test-valgrind fuzz clean
