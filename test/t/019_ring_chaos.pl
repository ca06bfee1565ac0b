
# Crash chaos (test/t/010_chaos.pl, every fault and every check) on a queue
# whose jobs are on a ring (issue 33, ADR 0028; the development setting
# pgq.ring_queues): kill -9 of workers between claim and complete and of
# the maintenance worker, terminated backends, an immediate shutdown and
# restart (the lanes and the lease map rebuilt from the ring's rows), with
# 0 jobs lost, none handed to two live claims, no superseded completion
# accepted, no lease left past its end.
use strict;
use warnings FATAL => 'all';

use FindBin;
use lib $FindBin::RealBin;

# Loaded here, at compile time, so that their INIT blocks run (the file
# below is run with do, when it is too late for them).
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use PgqTap;

$ENV{PGQ_CHAOS_RING} = 1;
my $chaos = "$FindBin::RealBin/010_chaos.pl";
do $chaos;
die "$chaos: $@" if $@;
