# attnc: build, test and install. Everything built lands under $(BUILD).
#
#   make             the compiler (build/attnc) and libattn (.a and .so)
#   make test        everything CI runs: sanitizer build, unit, golden,
#                    NVRTC and cache tests, a short fuzz run; GPU tests skip
#                    with a message where there is no GPU
#   make test-gpu    the GPU tests (needs a GPU and its driver)
#   make examples    the main job: every example compiled and run
#   make bench       the benchmark (needs a GPU and PyTorch)
#   make install     attnc, libattn (.a, versioned .so), attn.h, attn.pc,
#                    the man page and the language reference under
#                    $(DESTDIR)$(PREFIX) (PREFIX defaults to /usr/local)
#   make uninstall   removes what install wrote
#   make clean

BUILD ?= build
CUDA ?= /usr/local/cuda
CC ?= cc
SAN ?=
BISON ?= bison
FLEX ?= flex

WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
        -Wmissing-prototypes -Wpointer-arith -Wformat=2 -Wvla \
        -Wno-unused-parameter
OPT ?= -O2 -g
SANFLAGS :=
ifeq ($(SAN),1)
  SANFLAGS := -fsanitize=address,undefined
  OPT := -O1 -g -fno-omit-frame-pointer $(SANFLAGS) -fno-sanitize-recover=undefined
endif
CFLAGS := -std=c17 -fPIC -D_GNU_SOURCE $(OPT) $(WARN)
CPPFLAGS := -Icompiler -Iruntime -Iabi -Ireference -Icli -I$(BUILD)/gen -I$(CUDA)/include \
            -DATTNC_CUDA_HOME='"$(CUDA)"'
LDFLAGS := $(SANFLAGS) -L$(CUDA)/lib64 -Wl,-rpath,$(CUDA)/lib64
LDLIBS := -ldl -lm -lpthread

GEN := $(BUILD)/gen
TEMPLATES := $(sort $(wildcard templates/*.cuh)) abi/attn_abi.h abi/attn_layout.h
# The layout (docs/design.md): grammar/ and compiler/ make the compiler,
# runtime/ the library around it (together libattn); reference/ is the CPU
# reference, a library of its own (libattnref.a) that cli/ (the attnc
# command), the tests and the benchmarks link, and libattn does not.
CLI_SRC := $(sort $(wildcard cli/*.c))
COMPILER_SRC := $(sort $(wildcard compiler/*.c))
RUNTIME_SRC := $(sort $(wildcard runtime/*.c))
REF_SRC := $(sort $(wildcard reference/*.c))
LIB_OBJ := $(COMPILER_SRC:%.c=$(BUILD)/%.o) $(RUNTIME_SRC:%.c=$(BUILD)/%.o) \
           $(GEN)/attn.tab.o $(GEN)/lex.yy.o $(GEN)/templates.o $(GEN)/templates_id.o
REF_OBJ := $(REF_SRC:%.c=$(BUILD)/%.o)

all: $(BUILD)/attnc $(BUILD)/libattn.a $(BUILD)/libattn.so $(BUILD)/libattnref.a

$(BUILD)/attnc: $(CLI_SRC:%.c=$(BUILD)/%.o) $(BUILD)/libattnref.a $(BUILD)/libattn.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/libattn.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libattnref.a: $(REF_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libattn.so: $(LIB_OBJ)
	$(CC) $(LDFLAGS) -shared -Wl,-soname,libattn.so.0 -o $@ $^ $(LDLIBS)

# The parser and scanner are generated; their code gets a milder warning set.
$(GEN)/attn.tab.c $(GEN)/attn.tab.h: grammar/attn.y
	@mkdir -p $(GEN)
	$(BISON) -Wall -Werror --defines=$(GEN)/attn.tab.h -o $(GEN)/attn.tab.c $<

$(GEN)/lex.yy.c $(GEN)/lex.yy.h: grammar/attn.l $(GEN)/attn.tab.h
	@mkdir -p $(GEN)
	$(FLEX) --header-file=$(GEN)/lex.yy.h -o $(GEN)/lex.yy.c $<

GEN_CFLAGS := $(filter-out -Wmissing-prototypes -Wshadow,$(CFLAGS)) \
              -Wno-unused-function -Wno-sign-compare -Wno-unused-but-set-variable
$(GEN)/attn.tab.o: $(GEN)/attn.tab.c $(GEN)/lex.yy.h compiler/attnc.h
	$(CC) $(CPPFLAGS) $(GEN_CFLAGS) -c -o $@ $<
$(GEN)/lex.yy.o: $(GEN)/lex.yy.c $(GEN)/attn.tab.h compiler/attnc.h
	$(CC) $(CPPFLAGS) $(GEN_CFLAGS) -c -o $@ $<

# Templates and the kernel ABI header travel inside the library as strings.
$(BUILD)/embed: tools/embed.c
	@mkdir -p $(BUILD)
	$(CC) -std=c17 -O1 -Wall -Werror -o $@ $<
$(GEN)/templates.c: $(BUILD)/embed $(TEMPLATES)
	@mkdir -p $(GEN)
	$(BUILD)/embed $@ $(foreach f,$(TEMPLATES),$(subst .,_,$(basename $(notdir $(f))))_src=$(f))
$(GEN)/templates.o: $(GEN)/templates.c
	$(CC) $(CPPFLAGS) $(GEN_CFLAGS) -c -o $@ $<
# A digest of those texts (each file's name, then its bytes): the kernel
# cache keys a program by its unit with the texts replaced by their names
# (emit_unit_key) and this, instead of the whole text (runtime/api.c).
$(GEN)/templates_id.c: $(TEMPLATES)
	@mkdir -p $(GEN)
	@id=$$(for f in $(TEMPLATES); do printf '%s\n' "$$f"; cat "$$f"; done | sha256sum | cut -c1-64) && \
	  printf 'const char attn_templates_id[] = "%s";\n' "$$id" >$@
$(GEN)/templates_id.o: $(GEN)/templates_id.c
	$(CC) $(CPPFLAGS) $(GEN_CFLAGS) -c -o $@ $<

$(BUILD)/%.o: %.c compiler/attnc.h runtime/attn.h abi/attn_abi.h | $(GEN)/attn.tab.h $(GEN)/lex.yy.h
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# The main job: every example checked, compiled and run (GPU or CPU).
examples: deps all
	tools/run_examples.sh $(BUILD)/attnc

# Installation. The .so is versioned (soname libattn.so.0); attn.pc
# names the prefix without DESTDIR, as staged installs expect.
PREFIX ?= /usr/local
DESTDIR ?=
VERSION := $(shell sed -n 's/^\#define ATTNC_VERSION "\(.*\)"/\1/p' compiler/attnc.h)
INST := $(DESTDIR)$(PREFIX)
INSTALLED := bin/attnc lib/libattn.a lib/libattn.so.$(VERSION) lib/libattn.so.0 \
             lib/libattn.so include/attn.h lib/pkgconfig/attn.pc \
             share/man/man1/attnc.1 share/doc/attnc/language.md \
             share/doc/attnc/runtime.md share/doc/attnc/build.md

install: all
	install -d $(INST)/bin $(INST)/lib/pkgconfig $(INST)/include \
	  $(INST)/share/man/man1 $(INST)/share/doc/attnc
	install -m 755 $(BUILD)/attnc $(INST)/bin/attnc
	install -m 644 $(BUILD)/libattn.a $(INST)/lib/libattn.a
	install -m 755 $(BUILD)/libattn.so $(INST)/lib/libattn.so.$(VERSION)
	ln -sf libattn.so.$(VERSION) $(INST)/lib/libattn.so.0
	ln -sf libattn.so.0 $(INST)/lib/libattn.so
	install -m 644 runtime/attn.h $(INST)/include/attn.h
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' tools/attn.pc.in \
	  > $(INST)/lib/pkgconfig/attn.pc
	install -m 644 docs/attnc.1 $(INST)/share/man/man1/attnc.1
	install -m 644 docs/language.md docs/runtime.md docs/build.md $(INST)/share/doc/attnc/

uninstall:
	rm -f $(addprefix $(INST)/,$(INSTALLED))
	-rmdir $(INST)/share/doc/attnc 2>/dev/null

# python/attnc with its own copy of libattn, so `pip install ./python`
# gives a package that needs nothing on the loader's path.
python-lib: $(BUILD)/libattn.so
	cp $(BUILD)/libattn.so python/attnc/libattn.so.0

include tests/tests.mk

clean:
	rm -rf build

.PHONY: all clean examples install uninstall python-lib
.DELETE_ON_ERROR:
