# Builds and runs the tests of the stream readers (ci_sse_reader,
# ci_code_decoder) on their own, from the top of the tree:
#
#   make -f test/stream_reader.mk check          unit tests (cmocka)
#   make -f test/stream_reader.mk fuzz-regress   replay the fuzz corpora and regressions once
#   make -f test/stream_reader.mk fuzz-run       fuzz each target for FUZZ_SECONDS (default 30)
#   make -f test/stream_reader.mk all            the three
#   make -f test/stream_reader.mk coverage       line and branch coverage of the new
#                                                sources by the fuzz corpora
#   make -f test/stream_reader.mk clean
#
# Everything is built into test/fuzz/build/stream-readers/ (ignored by
# git). The fuzz targets need clang and its fuzzer runtime
# (libclang-rt-14-dev).

CC           ?= cc
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 30
FUZZ_FLAGS   ?=

TOP   := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))/..)
BUILD := $(TOP)/test/fuzz/build/stream-readers
FUZZ  := $(TOP)/test/fuzz

PKGS    := apr-1 json-c
INC     := -I$(TOP)/include -I$(TOP)/mod_code_interpreter/core
CFLAGS_ := -std=gnu11 -Wall -Wextra -Werror -g -O1 $(INC) $(shell pkg-config --cflags $(PKGS))
LIBS    := $(shell pkg-config --libs $(PKGS)) -lpthread

# The new sources and the existing core file they use.
SRC     := $(TOP)/mod_code_interpreter/core/ci_sse_reader.c \
           $(TOP)/mod_code_interpreter/core/ci_code_decoder.c \
           $(TOP)/mod_code_interpreter/ci_json.c
HEADERS := $(wildcard $(TOP)/include/*.h) $(wildcard $(TOP)/mod_code_interpreter/core/*.h)

TARGETS := sse_reader code_decoder
SAN     := -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
FCFLAGS := -g -O1 $(SAN) -std=gnu11 -Wall -Wextra -Werror $(INC) -I$(FUZZ) \
           $(shell pkg-config --cflags $(PKGS))

export UBSAN_OPTIONS ?= print_stacktrace=1:halt_on_error=1
export ASAN_OPTIONS  ?= detect_leaks=1

.PHONY: all check fuzz fuzz-regress fuzz-run coverage clean

all: check fuzz-regress fuzz-run

$(BUILD)/test_stream_reader: $(TOP)/test/unit/test_stream_reader.c $(SRC) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_) $< $(SRC) $(shell pkg-config --cflags --libs cmocka) $(LIBS) -o $@

check: $(BUILD)/test_stream_reader
	cd $(TOP) && $(BUILD)/test_stream_reader

$(BUILD)/fuzz_%: $(FUZZ)/fuzz_%.c $(FUZZ)/fuzz_common.h $(SRC) $(HEADERS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FCFLAGS) $< $(SRC) $(LIBS) -ldl -o $@

fuzz: $(patsubst %,$(BUILD)/fuzz_%,$(TARGETS))

# Every seed and every saved regression input, once.
fuzz-regress: fuzz
	@fail=0; for t in $(TARGETS); do \
	    files=$$(find $(FUZZ)/corpus/$$t $(FUZZ)/regressions/$$t -type f ! -name '.*' 2>/dev/null | sort); \
	    if $(BUILD)/fuzz_$$t -rss_limit_mb=2048 -timeout=10 $$files >$(BUILD)/regress-$$t.log 2>&1; \
	    then echo "$$t: replayed $$(echo $$files | wc -w) inputs, all passed"; \
	    else echo "$$t: FAILED, see $(BUILD)/regress-$$t.log"; fail=1; fi; \
	done; exit $$fail

# Fuzz each target for FUZZ_SECONDS. New inputs go to $(BUILD)/corpus/<t>;
# crashes to test/fuzz/crashes/<t>-*.
fuzz-run: fuzz
	@mkdir -p $(FUZZ)/crashes; fail=0; for t in $(TARGETS); do \
	    mkdir -p $(BUILD)/corpus/$$t; \
	    $(BUILD)/fuzz_$$t $(BUILD)/corpus/$$t $(FUZZ)/corpus/$$t \
	        -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 -timeout=10 \
	        -artifact_prefix=$(FUZZ)/crashes/$$t- -print_final_stats=1 \
	        $(FUZZ_FLAGS) >$(BUILD)/$$t.log 2>&1; rc=$$?; \
	    execs=$$(sed -n 's/^stat::number_of_executed_units: *//p' $(BUILD)/$$t.log); \
	    cov=$$(grep -o 'cov: [0-9]* ft: [0-9]* corp: [0-9/a-zA-Z]*' $(BUILD)/$$t.log | tail -n 1); \
	    echo "$$t: $${execs:-?} executions, $${cov:-no coverage line}"; \
	    if [ $$rc -ne 0 ]; then echo "$$t: FAILED (exit $$rc), see $(BUILD)/$$t.log"; \
	        grep -m 3 -E 'ERROR: |runtime error|fuzz check failed' $(BUILD)/$$t.log; fail=1; fi; \
	done; exit $$fail

# Source coverage of ci_<t>.c by corpus/<t>, regressions/<t> and the corpus
# kept from fuzz-run; one process per input.
COVFLAGS      := -g -O1 -fsanitize=fuzzer -fprofile-instr-generate -fcoverage-mapping \
                 -std=gnu11 $(INC) -I$(FUZZ) $(shell pkg-config --cflags $(PKGS))
LLVM_PROFDATA ?= llvm-profdata
LLVM_COV      ?= llvm-cov

$(BUILD)/cov/fuzz_%: $(FUZZ)/fuzz_%.c $(FUZZ)/fuzz_common.h $(SRC) $(HEADERS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(COVFLAGS) $< $(SRC) $(LIBS) -ldl -o $@

coverage: $(patsubst %,$(BUILD)/cov/fuzz_%,$(TARGETS))
	@for t in $(TARGETS); do \
	    rm -rf $(BUILD)/cov/$$t && mkdir -p $(BUILD)/cov/$$t; \
	    find $(BUILD)/corpus/$$t $(FUZZ)/corpus/$$t $(FUZZ)/regressions/$$t -type f 2>/dev/null | \
	        LLVM_PROFILE_FILE=$(BUILD)/cov/$$t/%p.profraw \
	        xargs -r -n 1 $(BUILD)/cov/fuzz_$$t >/dev/null 2>&1; \
	    $(LLVM_PROFDATA) merge -sparse $(BUILD)/cov/$$t/*.profraw \
	        -o $(BUILD)/cov/$$t.profdata || exit 1; \
	    echo "== $$t"; \
	    $(LLVM_COV) report $(BUILD)/cov/fuzz_$$t -instr-profile=$(BUILD)/cov/$$t.profdata \
	        $(TOP)/mod_code_interpreter/core/ci_$$t.c | grep -E '^/.*ci_' | sed 's|.*/||' | \
	        awk '{print $$1, "lines", $$(NF-3), "branches", $$NF}'; \
	done

clean:
	rm -rf $(BUILD)
