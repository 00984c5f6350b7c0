# tests.mk: test wiring, included by the Makefile. Sources are found by
# wildcard so each part of the project adds its own files:
#   tests/unit/*.c     Criterion unit tests, one binary
#   tests/diag/*.attn  malformed inputs beside their expected diagnostics
#   tests/golden/      IR and emitted-CUDA goldens of examples/*.attn
#   tests/gpu/*.c      GPU tests against the CPU reference (plain C)
#   tests/host/        emitted hooks, the FP8 rounding and conversions, the swizzle, compiled for the host and checked (no GPU)
#   tests/build/       attnc build's refusals; tests/build.sh also builds a
#                      source at an odd path and compiles what it wrote
#   tests/cache_warm.sh  attnc cache warm (attn_module_prepare) into a temp cache
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

$(BUILD)/tests/unit_tests: $(UNIT_SRC:%.c=$(BUILD)/%.o) $(BUILD)/libattnref.a $(BUILD)/libattn.a
	$(CC) $(LDFLAGS) -o $@ $^ -lcriterion $(LDLIBS)

$(BUILD)/tests/gpu/%: $(BUILD)/tests/gpu/%.o $(BUILD)/libattnref.a $(BUILD)/libattn.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

GPU_BIN := $(GPU_SRC:tests/gpu/%.c=$(BUILD)/tests/gpu/%)

deps:
	@tools/deps.sh

# What CI runs (through .ci/run): the sanitizer build and every test.
test: deps
	$(MAKE) BUILD=build/san SAN=1 test-here
	$(MAKE) test-install
	$(MAKE) test-python
	$(MAKE) fuzz

# python/attnc's tests (pytest) against this build's libattn.so: compiling,
# signatures and refusals everywhere, meta tensors and torch.compile
# tracing where PyTorch is, results, gradients, capture on a GPU.
test-python: all
	@tools/pydeps.sh
	ATTN_LIBRARY=$(CURDIR)/$(BUILD)/libattn.so python3 -m pytest -q -rs python/tests

# The unit tests run one at a time: with two workers, Criterion's runner
# (libcriterion 2.4, the parent process, none of our code) leaks 48 bytes of
# its own once tests/unit/test_faults.c's long test overlaps others, and
# LeakSanitizer fails the run on it (30 s against 16 s).
test-here: all $(BUILD)/tests/unit_tests $(GPU_BIN) $(BUILD)/tests/host/warm_load_check
	$(BUILD)/tests/unit_tests --jobs 1
	tests/golden.sh $(BUILD)/attnc
	tests/nvrtc.sh $(BUILD)/attnc
	@# (leaks unchecked here: LeakSanitizer's tracer can crash at exit scanning NVRTC's TLS, see
	@# tests/nvrtc.sh, which checks leaks over the same compiles)
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:allocator_may_return_null=1 python3 tools/compile_sweep.py \
	  --attnc $(BUILD)/attnc --out $(BUILD)/compile_sweep --seed 26 --count 24 --jobs 2 --no-minimize
	tests/build.sh $(BUILD)/attnc
	tests/cache_warm.sh $(BUILD)/attnc
	tests/host/sep_host_check.sh $(BUILD)/attnc
	tests/host/fp8_host_check.sh $(BUILD)/libattn.a
	tests/host/fwd90_v_host_check.sh
	tests/host/fwd90_q_host_check.sh
	tests/host/fwd90_rows_host_check.sh
	tests/host/softmax_host_check.sh
	tests/host/swz_host_check.sh
	tests/host/stage_host_check.sh
	tests/host/fp8_cvt_host_check.sh
	tests/host/widen_kv_host_check.sh
	tests/host/exp2_fma_host_check.sh
	tests/host/tanh_poly_host_check.sh
	tests/host/fwd90_protocol_check.sh
	tests/host/warm_load_check.sh $(BUILD)/tests/host/warm_load_check
	@# (NVRTC loaded under LeakSanitizer: its tracer's crash retried, tests/lib/lsan_retry.sh)
	bash -c '. tests/lib/lsan_retry.sh; lsan_retry $(BUILD)/sanitize_cases.err $(BUILD)/tests/gpu/sanitize_cases --compile-only; \
	  rc=$$?; cat $(BUILD)/sanitize_cases.err >&2; exit $$rc'
	@for t in $(GPU_BIN); do echo "== $$t"; $$t || exit 1; done

# A warm load does not load NVRTC (tests/host/warm_load_check.sh); the checker
# pokes the target into the context, so it sees libattn's private header.
$(BUILD)/tests/host/warm_load_check: tests/host/warm_load_check.c $(BUILD)/libattn.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libattn.a $(LDLIBS)

# The template on its own, with hand-written hooks (nvcc, cudart).
$(BUILD)/tests/gpu/template_sm80_test: tests/gpu/template_sm80_test.cu templates/fwd_sm80.cuh \
    templates/ptx.cuh templates/softmax.cuh templates/hooks.cuh compiler/tmpl_sm80.c abi/attn_abi.h abi/attn_layout.h
	@mkdir -p $(dir $@)
	$(CUDA)/bin/nvcc -std=c++17 -O3 -Iabi -gencode=arch=compute_90a,code=sm_90a \
	  -gencode=arch=compute_80,code=sm_80 -o $@ $<

$(BUILD)/tests/gpu/template_bwd_test: tests/gpu/template_bwd_test.cu templates/bwd_sm80.cuh \
    templates/ptx.cuh templates/hooks.cuh abi/attn_abi.h abi/attn_layout.h templates/philox.cuh
	@mkdir -p $(dir $@)
	$(CUDA)/bin/nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a \
	  -gencode=arch=compute_80,code=sm_80 -o $@ $<

# racecheck's controls for the sm_90 templates' mbarrier handoffs
# (tools/sanitize_device.sh runs it).
$(BUILD)/tests/gpu/racecheck_control: tests/gpu/racecheck_control.cu templates/ptx.cuh \
    templates/wgmma.cuh templates/common.cuh abi/attn_abi.h abi/attn_layout.h
	@mkdir -p $(dir $@)
	$(CUDA)/bin/nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a -o $@ $<

TEMPLATE_TESTS := $(BUILD)/tests/gpu/template_sm80_test $(BUILD)/tests/gpu/template_bwd_test

# The GPU tests without sanitizers, for a machine with a GPU.
test-gpu: all $(GPU_BIN) $(TEMPLATE_TESTS)
	@for t in $(GPU_BIN) $(TEMPLATE_TESTS); do echo "== $$t"; $$t || exit 1; done

# Regenerate goldens after an intended change; review the diff.
golden-update: all
	UPDATE=1 tests/golden.sh $(BUILD)/attnc

# The front end under libFuzzer for FUZZ_SECONDS, from the seed corpus.
FUZZ_BUILD := build/fuzz
fuzz: deps
	$(MAKE) BUILD=$(FUZZ_BUILD) CC=clang SAN= OPT="-O1 -g -fsanitize=fuzzer-no-link,address,undefined" \
	  $(FUZZ_BUILD)/libattn.a
	clang -O1 -g -fsanitize=fuzzer,address,undefined -Icompiler -Iabi -I$(FUZZ_BUILD)/gen \
	  -o $(FUZZ_BUILD)/fuzz_front tests/fuzz/fuzz_front.c $(FUZZ_BUILD)/libattn.a \
	  -L$(CUDA)/lib64 -Wl,-rpath,$(CUDA)/lib64 $(LDLIBS)
	@mkdir -p tests/fuzz/corpus-run
	@rm -f $(FUZZ_BUILD)/crash-* $(FUZZ_BUILD)/timeout-* $(FUZZ_BUILD)/leak-* $(FUZZ_BUILD)/oom-*
	$(FUZZ_BUILD)/fuzz_front -max_total_time=$(FUZZ_SECONDS) -timeout=2 -rss_limit_mb=2048 \
	  -max_len=65536 -print_final_stats=1 -artifact_prefix=$(FUZZ_BUILD)/ \
	  tests/fuzz/corpus-run tests/fuzz/corpus || { tests/fuzz/report.sh $(FUZZ_BUILD); exit 1; }

# `make install` into $(BUILD)/install, then every host example built
# against the installed files alone (pkg-config, the installed attnc),
# plus a staged DESTDIR install. The programs run where there is a GPU
# and say so where there is none. Also: no NVRTC link, and a clear status
# when NVRTC is missing.
HOST_PREFIX := $(CURDIR)/$(BUILD)/install
HOST_OUT := $(CURDIR)/$(BUILD)/host
HOST_ENV := PATH=$(HOST_PREFIX)/bin:$$PATH PKG_CONFIG_PATH=$(HOST_PREFIX)/lib/pkgconfig
test-install: all
	rm -rf $(HOST_PREFIX) $(HOST_OUT) $(BUILD)/destdir
	$(MAKE) install PREFIX=$(HOST_PREFIX)
	$(MAKE) install DESTDIR=$(CURDIR)/$(BUILD)/destdir PREFIX=/opt/attnc
	@for f in $(INSTALLED); do test -e $(BUILD)/destdir/opt/attnc/$$f || \
	  { echo "install: missing $$f"; exit 1; }; done
	grep -q '^prefix=/opt/attnc$$' $(BUILD)/destdir/opt/attnc/lib/pkgconfig/attn.pc
	$(MAKE) uninstall DESTDIR=$(CURDIR)/$(BUILD)/destdir PREFIX=/opt/attnc
	test -z "$$(find $(BUILD)/destdir -type f)"
	! readelf -d $(HOST_PREFIX)/lib/libattn.so | grep -q nvrtc
	readelf -d $(HOST_PREFIX)/lib/libattn.so | grep -q 'SONAME.*libattn.so.0'
	@# The library never prints, exits or aborts: it imports none of them.
	! nm -D --undefined-only $(HOST_PREFIX)/lib/libattn.so | \
	  grep -wE 'abort|exit|_exit|_Exit|quick_exit|printf|puts|fputs|fprintf|vfprintf|putchar|perror|fwrite|stdout|stderr|__assert_fail|__printf_chk|__fprintf_chk'
	@# Nor does it hold the CPU reference (libattnref.a).
	! nm -D --defined-only $(HOST_PREFIX)/lib/libattn.so | grep -wE 'ref_forward|ref_backward|interp_run'
	ATTN_NVRTC=/nonexistent/libnvrtc.so $(HOST_PREFIX)/bin/attnc compile \
	  examples/sdpa.attn --arch sm_80 -o $(BUILD)/nonvrtc.cubin 2>$(BUILD)/nonvrtc.err; \
	  test $$? -eq 3 && grep -q 'libnvrtc not found' $(BUILD)/nonvrtc.err
	mkdir -p $(HOST_OUT)
	cp -r examples/host/common examples/host/jit examples/host/aot examples/host/cmake examples/host/ring $(HOST_OUT)/
	$(HOST_ENV) $(MAKE) -C $(HOST_OUT)/jit
	$(HOST_ENV) $(MAKE) -C $(HOST_OUT)/ring
	$(HOST_ENV) $(MAKE) -C $(HOST_OUT)/aot
	cp -r $(HOST_OUT)/aot/gen $(HOST_OUT)/aot-gen-1
	touch $(HOST_OUT)/aot/sdpa.attn
	$(HOST_ENV) $(MAKE) -C $(HOST_OUT)/aot
	diff -r $(HOST_OUT)/aot/gen $(HOST_OUT)/aot-gen-1
	$(HOST_ENV) cmake -S $(HOST_OUT)/cmake -B $(HOST_OUT)/cmake/build -DCMAKE_BUILD_TYPE=Release -DCUDAToolkit_ROOT=$(CUDA)
	$(HOST_ENV) cmake --build $(HOST_OUT)/cmake/build
	python3 -m py_compile examples/host/dlpack/attn_torch.py
	! ldd $(HOST_OUT)/aot/aot_example | grep -q nvrtc
	$(HOST_OUT)/jit/jit_example
	$(HOST_OUT)/ring/ring_example --check --seq 1024
	$(HOST_OUT)/aot/aot_example
	$(HOST_OUT)/cmake/build/cmake_example

.PHONY: deps test test-here test-gpu golden-update fuzz test-install test-python
