# pgq_cpp: PGXS builds and installs the extension; `make test` and
# `make demo` are the two commands a newcomer needs (see README.md).

EXTENSION  = pgq_cpp
MODULE_big = pgq_cpp
# The full install script of the current version (pgq_cpp--3.1.sql), and
# release 1.0's with the update scripts from each release to the next (for
# ALTER EXTENSION pgq_cpp UPDATE): every sql/pgq_cpp--*.sql.
DATA       = $(sort $(wildcard sql/pgq_cpp--*.sql))
PGFILEDESC = "pgq_cpp - durable job queue inside PostgreSQL"

SRCS = $(sort $(wildcard src/core/*.cpp) $(wildcard src/pg/*.cpp) $(wildcard src/store/*.cpp) \
              $(wildcard src/service/*.cpp) $(wildcard src/api/*.cpp) \
              $(wildcard src/bgw/*.cpp)) src/module.cpp
# `make RINGS_PROTO=1`: the issue 33 prototype of jobs on an append-only
# ring (bench/proto, measured by bench/rings_proto.sh, which builds it in a
# copy of the tree: the flag is not tracked by the objects); never in a release.
ifeq ($(RINGS_PROTO),1)
SRCS += bench/proto/rings.cpp
endif
OBJS = $(SRCS:.cpp=.o)

# pg_regress: one file per feature in sql/ with expected output in expected/,
# on a temporary instance configured by test/pgq_test.conf.
REGRESS      = install queues enqueue claim finish dead_letter maintain schedules outbox coordination \
               handlers bad_input boundary groups rate_limit rights metrics lifecycle dedupe caps dependencies \
               overview streams stream_limits retention read_surfaces ring_queues ring_reads ring_turns ring_carry ring_cancel ring_order ring_dependencies \
               ring_priorities ring_groups ring_dedupe fairness backpressure tracing
REGRESS_OPTS = --temp-instance=tmp_check --temp-config=test/pgq_test.conf

# Isolation specs live in test/isolation/{specs,expected}.
ISOLATION      = claim_skip_locked complete_fencing enqueue_dedupe lock_timeout \
                 next_turn_consecutive assign_one_owner once_rollback schedule_fire_once \
                 group_fifo schedule_takeover lifecycle_race dedupe_replace dedupe_period \
                 dedupe_follower_orphan cap_edge dependency_fan_in \
                 dependency_cancel_race stream_late_commit stream_two_consumers \
                 stream_redeliver stream_rebase_inflight stream_consumer_guard stream_consumer_limit retention_ring_turn dependency_parent_lock \
                 cancel_job_outcome ring_claim_skip ring_late_commit ring_complete_fencing ring_complete_uncommitted \
                 ring_reads_uncommitted ring_turn ring_cancel_claim ring_cap ring_close_wait ring_carry_race ring_parent_race ring_ddl \
                 ring_priority_give ring_group_room ring_dedupe_follow ring_claim_rows ring_move_race ring_prepared_claim retry_dead_key_race fair_claimers max_pending_producers
ISOLATION_OPTS = --inputdir=test/isolation --outputdir=output_iso \
                 --temp-instance=tmp_check_iso --temp-config=test/pgq_test.conf

# The library's version is the control file's default_version: one source,
# read by the catalog check (src/pg/catalog_version.h, ADR 0024).
PGQ_VERSION := $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" $(dir $(firstword $(MAKEFILE_LIST)))pgq_cpp.control)
PG_CPPFLAGS = -I$(srcdir)/src -DPGQ_VERSION='"$(PGQ_VERSION)"'
ifeq ($(RINGS_PROTO),1)
PG_CPPFLAGS += -DPGQ_RINGS_PROTO
endif
PG_CXXFLAGS = -std=c++17 -fexceptions -Wall -Wextra -Wshadow -Wno-register \
              -Wno-missing-field-initializers -Wno-unused-parameter -Wno-sign-compare
ifeq ($(WERROR),1)
PG_CXXFLAGS += -Werror
endif
SHLIB_LINK  = -lstdc++

# PGXS's bitcode rule drops PG_CXXFLAGS for C++; we do not ship JIT bitcode.
override with_llvm = no
# Rebuild what includes a changed header (dependency files in .deps/).
override autodepend = yes

EXTRA_CLEAN = build output_iso tmp_check_iso .deps

PG_CONFIG ?= $(firstword $(wildcard /usr/lib/postgresql/15/bin/pg_config) pg_config)
PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
ifneq ($(PGXS),)
include $(PGXS)
else
all:
	@echo "PostgreSQL server development files are missing." >&2
	@echo "Run 'make test' or 'make demo' (they install what is missing), or" >&2
	@echo "apt-get install postgresql-server-dev-15." >&2
	@exit 1
endif

# The catalog check is rebuilt when the version changes.
src/pg/catalog_version.o: pgq_cpp.control

# PGXS names a dependency file after its source's base name (.deps/claim.Po),
# so same-named sources of two zones (src/api/claim.cpp, src/store/claim.cpp;
# core/ and api/ rights.cpp) overwrote each other's, and an incremental
# build missed what changed: name it after the path instead.
ifeq ($(autodepend), yes)
%.o : %.cpp
	@mkdir -p $(DEPDIR)
	$(COMPILE.cc) -o $@ $< -MMD -MP -MF $(DEPDIR)/$(subst /,_,$*).Po
endif

.PHONY: test demo unit bench test-cluster

# Installs what is missing, builds, runs every test; ends with a summary line.
# `make test PROFILE=long`: the stress and chaos runs at ten times their size
# (600,000 jobs; 100,000 jobs with 30 faults), about 15 minutes more.
test:
	@PGQ_PROFILE=$(PROFILE) bash scripts/test.sh

# Installs what is missing, builds, starts a throwaway cluster, runs a scenario.
demo:
	@bash scripts/demo.sh

# The pure C++ core and its GoogleTest unit tests (CMake + CTest).
unit:
	cmake -S . -B build -DCMAKE_BUILD_TYPE=Release $(if $(filter 1,$(WERROR)),-DPGQ_WERROR=ON)
	cmake --build build -j2
	cd build && ctest --output-on-failure

bench:
	@bash bench/run.sh

# The relay against a three-node RabbitMQ cluster (a node killed under load)
# and a PostgreSQL failover to a synchronous standby: about 4 minutes, not
# part of `make test` (test/relay/cluster.sh).
test-cluster:
	@bash test/relay/cluster.sh
