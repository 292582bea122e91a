# Each target is one step of the pipeline: one tool reading the previous step's document and
# writing its own, so any step can be rerun on the saved document.
#
#   make JOB=job.json preflight      resolve + preflight      -> .slurm-tools/preflight.json
#   make sync                        sync tracked + untracked -> .slurm-tools/synced.json
#   make build                       submit the build job, watch it -> .slurm-tools/built.json
#   make run                         submit the run job       -> .slurm-tools/submitted.json
#   make watch                       watch it to a verdict    -> .slurm-tools/report.json
#   make all                         everything above, in order
#   make alloc                       hold an allocation        -> .slurm-tools/alloc.json
#   make loop CMD='pytest -x'        sync and run CMD in it: one ssh execution (edit, repeat)
#   make release                     release the allocation
#   make report                      print the last report as a table
#   make install PREFIX=~/.local     the binaries, man pages and shell completions
#
# JOB is the job document (default: the local test cluster's sample job); CATALOG the cluster
# catalog (default: the local test cluster's). DIR is where the step documents go. Set TOOLS to
# a directory holding the binaries (default: target/release, built on demand).

TOOLS   ?= target/release
DIR     ?= .slurm-tools
JOB     ?= $(shell scripts/local-cluster info 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["sample_job"])' 2>/dev/null)
CATALOG ?= $(shell scripts/local-cluster info 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["catalog"])' 2>/dev/null)
WATCH_FLAGS ?= --interval 5

PREFIX  ?= $(HOME)/.local

SHELL := /bin/bash
# GNU make 3.81 (macOS's /usr/bin/make) ignores .SHELLFLAGS: each piped recipe also says
# `set -o pipefail` itself, so a failing first tool fails the step everywhere.
.SHELLFLAGS := -o pipefail -ec
.PHONY: all tools resolve preflight sync build run watch report clean cluster test demo docs install \
	alloc loop release \
	preflight-again sync-again build-again run-again watch-again

all: watch

tools:
	@if [ "$(TOOLS)" = target/release ]; then cargo build --release --quiet; fi

cluster:
	scripts/local-cluster up

$(DIR):
	mkdir -p $(DIR)

resolve: tools | $(DIR)
	$(TOOLS)/slurm-resolve $(if $(CATALOG),--catalog $(CATALOG)) $(JOB) > $(DIR)/resolved.json

preflight: resolve
	$(TOOLS)/slurm-ssh-preflight $(DIR)/resolved.json > $(DIR)/preflight.json

sync: preflight
	set -o pipefail; $(TOOLS)/slurm-sync-tracked $(DIR)/preflight.json | $(TOOLS)/slurm-sync-untracked > $(DIR)/synced.json

build: sync
	set -o pipefail; $(TOOLS)/slurm-submit --build $(DIR)/synced.json | $(TOOLS)/slurm-watch $(WATCH_FLAGS) > $(DIR)/built.json

run: build
	$(TOOLS)/slurm-submit $(DIR)/built.json > $(DIR)/submitted.json

watch: run
	$(TOOLS)/slurm-watch $(WATCH_FLAGS) $(DIR)/submitted.json > $(DIR)/report.json

# The inner loop in a held allocation: `make alloc` once, then edit and `make loop` as often as
# needed (both syncs and CMD in one ssh execution; without CMD, the job's `command`; its output
# on make's stdout and stderr, the document in loop.json), then `make release`.
alloc: preflight
	$(TOOLS)/slurm-alloc up $(DIR)/preflight.json > $(DIR)/alloc.json

# CMD reaches the recipe through the environment as written (make expands nothing in it), so its
# quotes, `;` and `$` are the cluster shell's.
LOOP_CMD = $(value CMD)
export LOOP_CMD
loop: tools
	$(TOOLS)/slurm-alloc exec --sync --doc $(DIR)/loop.json $(DIR)/alloc.json -- $${LOOP_CMD:+"$$LOOP_CMD"}

release: tools
	$(TOOLS)/slurm-alloc down $(DIR)/alloc.json > $(DIR)/released.json

# Rerun single steps on the saved documents, without redoing the ones before.
preflight-again sync-again build-again run-again watch-again: tools
	@set -o pipefail; case $@ in \
	  preflight-again) $(TOOLS)/slurm-ssh-preflight $(DIR)/resolved.json > $(DIR)/preflight.json ;; \
	  sync-again) $(TOOLS)/slurm-sync-tracked $(DIR)/preflight.json | $(TOOLS)/slurm-sync-untracked > $(DIR)/synced.json ;; \
	  build-again) $(TOOLS)/slurm-submit --build $(DIR)/synced.json | $(TOOLS)/slurm-watch $(WATCH_FLAGS) > $(DIR)/built.json ;; \
	  run-again) $(TOOLS)/slurm-submit $(DIR)/built.json > $(DIR)/submitted.json ;; \
	  watch-again) $(TOOLS)/slurm-watch $(WATCH_FLAGS) $(DIR)/submitted.json > $(DIR)/report.json ;; \
	esac

report: tools
	$(TOOLS)/slurm-report --table $(DIR)/report.json

test:
	scripts/test

demo:
	scripts/demo

docs: tools
	scripts/gen-docs

clean:
	rm -rf $(DIR)

# For a laptop without the test cluster: the binaries in $(PREFIX)/bin, their man pages in
# $(PREFIX)/share/man/man1, and bash, zsh and fish completions where those shells look.
install:
	cargo build --release --quiet
	install -d $(PREFIX)/bin $(PREFIX)/share/man/man1 $(PREFIX)/share/bash-completion/completions \
		$(PREFIX)/share/zsh/site-functions $(PREFIX)/share/fish/vendor_completions.d
	for t in $$(ls completions/bash); do \
		install -m 755 target/release/$$t $(PREFIX)/bin/$$t; \
		install -m 644 docs/man/$$t.1 $(PREFIX)/share/man/man1/$$t.1; \
		install -m 644 completions/bash/$$t $(PREFIX)/share/bash-completion/completions/$$t; \
		install -m 644 completions/zsh/_$$t $(PREFIX)/share/zsh/site-functions/_$$t; \
		install -m 644 completions/fish/$$t.fish $(PREFIX)/share/fish/vendor_completions.d/$$t.fish; \
	done
	@echo "installed into $(PREFIX): add $(PREFIX)/bin to PATH (and $(PREFIX)/share/man to MANPATH if man does not find the pages)"
