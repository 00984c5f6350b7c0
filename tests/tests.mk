# tests.mk: test wiring, included by the Makefile. Sources are found by
# wildcard so each part of the project adds its own files:
#   tests/unit/*.c     Criterion unit tests, one binary
#   tests/diag/*.attn  malformed inputs beside their expected diagnostics
#   tests/golden/      IR and emitted-CUDA goldens of examples/*.attn
#   tests/gpu/*.c      GPU tests against the CPU reference (plain C)
#   tests/fuzz/        the front end's libFuzzer harness and seed corpus
#
# `make test` builds everything again under ASan+UBSan in build/san and runs
# it all there; the GPU tests skip with a message where there is no GPU.

UNIT_SRC := $(sort $(wildcard tests/unit/*.c))
GPU_SRC := $(sort $(wildcard tests/gpu/*.c))
FUZZ_SECONDS ?= 60
export ASAN_OPTIONS := detect_leaks=1:abort_on_error=0:allocator_may_return_null=1
export LSAN_OPTIONS := suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS := print_stacktrace=1:halt_on_error=1

$(BUILD)/tests/unit_tests: $(UNIT_SRC:%.c=$(BUILD)/%.o) $(BUILD)/libattn.a
	$(CC) $(LDFLAGS) -o $@ $^ -lcriterion $(LDLIBS)

$(BUILD)/tests/gpu/%: $(BUILD)/tests/gpu/%.o $(BUILD)/libattn.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

GPU_BIN := $(GPU_SRC:tests/gpu/%.c=$(BUILD)/tests/gpu/%)

deps:
	@tools/deps.sh

# What CI runs (through .ci/run): the sanitizer build and every test.
test: deps
	$(MAKE) BUILD=build/san SAN=1 test-here
	$(MAKE) fuzz

test-here: all $(BUILD)/tests/unit_tests $(GPU_BIN)
	$(BUILD)/tests/unit_tests --jobs 2
	tests/golden.sh $(BUILD)/attnc
	tests/nvrtc.sh $(BUILD)/attnc
	@for t in $(GPU_BIN); do echo "== $$t"; $$t || exit 1; done

# The GPU tests without sanitizers, for a machine with a GPU.
test-gpu: all $(GPU_BIN)
	@for t in $(GPU_BIN); do echo "== $$t"; $$t || exit 1; done

# Regenerate goldens after an intended change; review the diff.
golden-update: all
	UPDATE=1 tests/golden.sh $(BUILD)/attnc

# The front end under libFuzzer for FUZZ_SECONDS, from the seed corpus.
FUZZ_BUILD := build/fuzz
fuzz: deps
	$(MAKE) BUILD=$(FUZZ_BUILD) CC=clang SAN= OPT="-O1 -g -fsanitize=fuzzer-no-link,address,undefined" \
	  $(FUZZ_BUILD)/libattn.a
	clang -O1 -g -fsanitize=fuzzer,address,undefined -Icompiler -I$(FUZZ_BUILD)/gen \
	  -o $(FUZZ_BUILD)/fuzz_front tests/fuzz/fuzz_front.c $(FUZZ_BUILD)/libattn.a \
	  -L$(CUDA)/lib64 -Wl,-rpath,$(CUDA)/lib64 $(LDLIBS)
	@mkdir -p tests/fuzz/corpus-run
	$(FUZZ_BUILD)/fuzz_front -max_total_time=$(FUZZ_SECONDS) -timeout=2 -rss_limit_mb=2048 \
	  -max_len=65536 -print_final_stats=1 tests/fuzz/corpus-run tests/fuzz/corpus

.PHONY: deps test test-here test-gpu golden-update fuzz
