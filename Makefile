# radixmlp: `make` builds radixmlp, test_radixmlp and bench; `make run` runs the demo; `make test` runs the tests.
# Needs the CUDA toolkit (nvcc, cuBLAS) to build; a GPU only to run the CUDA path (everything else runs on the CPU).
CUDA_HOME ?= /usr/local/cuda
NVCC      := $(CUDA_HOME)/bin/nvcc
CUDA_ARCH ?= 80 90
CC        ?= gcc

comma     := ,
space     := $() $()
ifeq ($(wildcard $(NVCC)),)
  $(error nvcc not found at $(NVCC): install the CUDA toolkit or run `make CUDA_HOME=/path/to/cuda`)
endif
ifeq ($(MAKECMDGOALS),clean)
else
  $(info radixmlp: nvcc $(shell $(NVCC) --version | sed -n 's/.*release \([0-9.]*\).*/\1/p') at $(NVCC); building for sm_$(subst $(space),$(comma) sm_,$(strip $(CUDA_ARCH))) + PTX compute_$(lastword $(CUDA_ARCH)) (override with CUDA_ARCH="...")$(if $(shell command -v nvidia-smi 2>/dev/null),, ; no nvidia-smi here: GPU tests will report themselves skipped))
endif
GENCODE   := $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(a),code=sm_$(a)) \
             -gencode arch=compute_$(lastword $(CUDA_ARCH)),code=compute_$(lastword $(CUDA_ARCH))
CFLAGS    ?= -O2
CFLAGS    += -std=c99 -Wall -Wextra -Werror=implicit-function-declaration -D_DEFAULT_SOURCE
NVFLAGS   := -std=c++17 -O2 $(GENCODE) -Xcompiler -Wall,-Wextra -Wno-deprecated-gpu-targets
LDLIBS    := -L$(CUDA_HOME)/lib64 -Xlinker -rpath=$(CUDA_HOME)/lib64 -lcublas -lm

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

test: test_radixmlp
	./test_radixmlp

clean:
	rm -f radixmlp test_radixmlp bench *.o

.PHONY: all run test clean
