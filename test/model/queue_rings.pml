/*
 * The claim protocol of the queues on segment rings (issue 33; the shape of
 * docs/design/queues-on-rings.md), as a Promela model for SPIN.
 *
 * What is modelled: one ring per queue whose segments hold rows of three
 * kinds (entries, receipts, closures), each appended to the segment that is
 * current when it is written, so a job's receipt or closure may lie in a
 * later segment than its entry. Producers append entries (one per job) and
 * commit or abort, in any order (a late-committing enqueue); claimers take
 * entries under the lane's lock (shared memory: a cursor, the entries it
 * passed while their inserter was in progress, the entries given back) and
 * commit or abort their claim (a receipt); a completion checks the live
 * lease of its (job, attempt) and commits or aborts (a closure); leases end
 * at any time and their jobs are offered again; the current segment is
 * sealed and the next one takes the appends at any time; maintenance
 * truncates the oldest segment once every entry in it is finished or
 * carried, and carries a job still unfinished in the oldest sealed segment
 * forward: its entry (with the attempts so far) and, if it runs, its live
 * receipt appended again to the current segment in one transaction that
 * commits, aborts or dies in a crash; the server crashes at any point
 * (every open transaction aborts, every backend dies, shared memory is
 * rebuilt from the rows of the segments not truncated -- a job's newest
 * entry, the receipts after it, its closure -- and time).
 *
 * What is checked (assert): a job is completed at most once and only by its
 * current attempt (a fenced completion never lands, two claims never both
 * complete); a claim never hands out a job whose lease is live (two live
 * holders), never one that is finished, never one whose entry is
 * truncated, and always with an attempt above every attempt that was ever
 * committed (fencing survives truncation and crashes); a truncation leaves
 * the rebuild every unfinished job's entry and live receipt and every
 * finished job's closure where its entry is still seen; and, after every
 * process has ended and the leases have run out, a drain completes every
 * committed job (none lost, a late commit not skipped).
 *
 * TAKEBACK: an idle lane taken back and built again from the rows while
 * producers run (with ROWS_WITH_ENTRY, MAXCARRY 0: the engine as built).
 *
 * ROWS_WITH_ENTRY: the engine as built (ADR 0028 "Turning and truncating,
 * as built"): a receipt or closure goes to its entry's segment, not the
 * current one, and any sealed segment whose entries are all finished is
 * truncated, in any order (the ring layer's Reclaim); no carry yet
 * (MAXCARRY 0).
 *
 * Planted bugs (each must make the check fail; test/model/check.sh):
 *   BUG_SKIP_INPROGRESS        the cursor passes an in-progress entry and forgets it
 *   BUG_NO_FENCE               a completion does not check its attempt
 *   BUG_NO_GIVEBACK            an aborted claim does not give its entry back
 *   BUG_TRUNCATE_EARLY         a segment is truncated once the cursor passed its entries
 *   BUG_TRUNCATE_OUT_OF_ORDER  any sealed segment is truncated, not only the oldest:
 *                              a job's receipt goes with a newer segment, its entry
 *                              stays in the older one, a rebuild finds it ready
 *   BUG_CARRY_WITHOUT_RECEIPT  a carry of a running job appends its entry, not its
 *                              receipt: a rebuild finds it ready while its lease is live
 *   BUG_CARRY_UNLOCKED         the carry appends its rows after it read the job, not
 *                              under the lock the completion's fence takes: a completion
 *                              commits between, a rotation follows, the closure lies in
 *                              an older segment than the copy and is truncated first,
 *                              and the finished job's copy looks unfinished
 *   BUG_ROWS_IN_CURRENT        (with ROWS_WITH_ENTRY) receipts and closures go to the
 *                              current segment while segments are truncated in any
 *                              order: a job's receipt goes with a newer segment
 *   BUG_REBUILD_PASSES_AHEAD   (with TAKEBACK) the lane built again while an enqueue
 *                              is in progress puts its entry in the passed set even
 *                              when it is ahead of the new cursor: the cursor meets it
 *                              again, and it is handed out twice
 * (With the truncation's own asserts taken out, the last three still fail,
 * on a claim's asserts: a job handed out while its lease is live or with an
 * attempt already committed -- two live holders -- or completed twice.)
 *
 * Bounds (macros, set by check.sh): J jobs (one producer each), claimers
 * taking R1 and R2 jobs, NSEG segments (the last never sealed), MAXCARRY
 * carries, one crash. The default, the rings: J 2, R1 = R2 = 1, NSEG 3,
 * MAXCARRY 1 (three segments are the fewest in which a newer segment can
 * be truncated before an older one). Run beside it, the claims at the
 * scale the model had before the rings (J 3, R1 = R2 = 2) on one segment
 * (no rotation, so no truncation or carry); both together are exhaustive
 * and fit in minutes, every ring feature at J 3 with two claims each does
 * not (over 500 million states).
 *
 * Modelling choices: a receipt or closure lands in the segment current when
 * its transaction commits (the engine inserts it earlier, in the same or an
 * older segment, and TRUNCATE waits for the writer's lock; the one race
 * where the earlier insert would matter, a claim or completion in flight
 * when a carry reads the job, cannot arise because the carry skips such
 * jobs). The carry reads the job and appends its rows in one step, under
 * the lane's and the lease map's lock, and commits later; a crash, a lease
 * end, a completion, a rotation may come between. Only the newest receipt
 * of a job is kept: older ones always had their lease ended, lie in the
 * same or older segments, and add nothing to a rebuild while segments go
 * oldest first.
 */

#ifndef J
#define J 2          /* jobs; entry i is job i */
#endif
#ifndef NSEG
#define NSEG 3       /* segments 0..2; the last is never sealed */
#endif
#define NIL 255
#ifndef R1
#define R1 1      /* claims by the first claimer */
#endif
#ifndef R2
#define R2 1      /* claims by the second claimer */
#endif
#ifndef MAXCARRY
#define MAXCARRY 1   /* carries per maintenance run */
#endif

mtype = { NONE, INPROG, COMMITTED, ABORTED, CLAIMING, LIVE, CLOSING, CARRYING };

/* Durable: what the ring holds (and the clock). Each row keeps the segment
   it was written in; truncation removes a segment's rows from what a
   rebuild sees (the variables stay, as the history the asserts judge by). */
mtype entry_st[J];     /* the inserting transaction: NONE, INPROG, COMMITTED, ABORTED */
byte eseg[J];          /* the segment of the entry */
byte n = 0;            /* entries appended */
byte cseg[J];          /* the segment of the newest carried copy of the entry; NIL none */
byte cbase[J];         /* the attempts so far, recorded in that copy */
byte receipt[J];       /* attempt of the newest committed receipt; 0 none */
byte rseg[J];          /* its segment */
byte rcseg[J];         /* the segment of its carried copy; NIL none */
bool expired[J];       /* that receipt's lease has ended (time survives a crash) */
byte outcome[J];       /* the attempt that completed the job (its closure); 0 none */
byte oseg[J];          /* the closure's segment */
byte cur = 0;          /* the segment taking appends; older ones are sealed */
bool truncated[NSEG];

/* Shared memory: lost in a crash, rebuilt from the above. */
byte cursor = 0;
bool passed[J];        /* passed by the cursor while its inserter was in progress */
bool ready[J];         /* given back: an aborted claim, an ended lease, a carry, a rebuild */
bool moved[J];         /* carried: the cursor skips the old entry, the job is offered from its copy */
byte lease[J];         /* the attempt holding the job; 0 none */
mtype lease_st[J];     /* NONE, CLAIMING, LIVE, CLOSING (completion in flight), CARRYING (a ready job being carried) */
byte attempts[J];      /* attempts handed out */

bool crashed = false;

/* Scratch of the atomic steps below, not part of the state. */
hidden byte h_base, h_rc;
hidden byte h_ent, h_copy, h_fin;

#define NEWEST(j) (cseg[j] != NIL -> cseg[j] : eseg[j])
/* Where a receipt or closure of job j goes: the current segment (the
   design), or its newest entry's segment (ROWS_WITH_ENTRY, the engine as
   built: a segment then holds all of its jobs' rows). */
#if defined(ROWS_WITH_ENTRY) && !defined(BUG_ROWS_IN_CURRENT)
#define ROWSEG(j) NEWEST(j)
#else
#define ROWSEG(j) cur
#endif
#define LIVE_LEASE(j) (receipt[j] != 0 && !expired[j] && outcome[j] == 0)

/* What a rebuild sees of job j in the segments not truncated: its newest
   entry (h_ent; h_copy when it is a carried copy, h_base the attempts it
   records), the newest receipt after it (h_rc, 0 none), its closure (h_fin). */
inline view(j) {
  if
  :: cseg[j] != NIL && !truncated[cseg[j]] -> h_ent = true; h_copy = true; h_base = cbase[j]
  :: else -> h_copy = false; h_base = 0;
     h_ent = (entry_st[j] == COMMITTED && !truncated[eseg[j]])
  fi;
  if
  :: receipt[j] != 0 && (!h_copy || receipt[j] > h_base) && !truncated[rseg[j]] -> h_rc = receipt[j]
  :: receipt[j] != 0 && h_copy && receipt[j] == h_base && rcseg[j] != NIL && !truncated[rcseg[j]] -> h_rc = receipt[j]
  :: else -> h_rc = 0
  fi;
  h_fin = (outcome[j] != 0 && !truncated[oseg[j]])
}

/* Under the lane's lock: the next entry to hand out, or NIL. */
inline pick(pos) {
  pos = NIL;
  i = 0;
  do
  :: i < n && pos == NIL ->
     if
     :: ready[i] -> pos = i; ready[i] = false
     :: !ready[i] && passed[i] && entry_st[i] == COMMITTED -> pos = i; passed[i] = false
     :: !ready[i] && passed[i] && entry_st[i] == ABORTED -> passed[i] = false
     :: else -> skip
     fi;
     i++
  :: else -> break
  od;
  do
  :: pos == NIL && cursor < n ->
     if
     :: moved[cursor] -> skip   /* carried forward: offered from its copy */
     :: !moved[cursor] && entry_st[cursor] == INPROG ->
#ifndef BUG_SKIP_INPROGRESS
        passed[cursor] = true
#else
        skip
#endif
#ifdef TAKEBACK
     /* A cursor built again may start behind entries of a segment since
        truncated: it walks the rows there are, as the engine's does. */
     :: !moved[cursor] && entry_st[cursor] == COMMITTED && truncated[eseg[cursor]] -> skip
     :: !moved[cursor] && entry_st[cursor] == COMMITTED && !truncated[eseg[cursor]] -> pos = cursor
#else
     :: !moved[cursor] && entry_st[cursor] == COMMITTED -> pos = cursor
#endif
     :: !moved[cursor] && entry_st[cursor] == ABORTED -> skip
     fi;
     cursor++
  :: else -> break
  od;
  if
  :: pos != NIL ->
     assert(!truncated[NEWEST(pos)]);  /* never hand out a reclaimed entry */
     assert(outcome[pos] == 0);         /* never hand out a finished job */
     assert(!LIVE_LEASE(pos));          /* never while a lease on it is live */
     attempts[pos]++;
     assert(attempts[pos] > receipt[pos]);  /* above every committed attempt */
     lease[pos] = attempts[pos];
     lease_st[pos] = CLAIMING
  :: else -> skip
  fi;
  i = 0
}

proctype Producer() {
  byte me;
  if
  :: atomic { !crashed -> me = n; entry_st[me] = INPROG; eseg[me] = cur; n++ }
  :: crashed -> goto done
  fi;
  if
  :: atomic { !crashed -> entry_st[me] = COMMITTED }
  :: atomic { !crashed -> entry_st[me] = ABORTED }
  :: crashed -> skip   /* the crash aborted it */
  fi;
done:
  skip
}

proctype Claimer(byte maxrounds) {
  byte pos, my, i, rounds = 0;
  bool closing;
  do
  :: crashed -> break          /* a crash ends every backend */
  :: rounds == maxrounds -> break   /* bounded: attempts stay small */
  :: !crashed && rounds < maxrounds ->
     rounds++;
     d_step {
       if
       :: !crashed -> pick(pos); if :: pos != NIL -> my = lease[pos] :: else -> skip fi
       :: else -> pos = NIL   /* crashed meanwhile */
       fi }
     if
     :: pos == NIL -> break
     :: else -> skip
     fi;
     /* The claim's transaction ends: its receipt, in the current segment. */
     if
     :: atomic { !crashed ->
          receipt[pos] = my; rseg[pos] = ROWSEG(pos); rcseg[pos] = NIL; expired[pos] = false;
          lease_st[pos] = LIVE }
     :: atomic { !crashed ->
          lease[pos] = 0; lease_st[pos] = NONE;
#ifndef BUG_NO_GIVEBACK
          ready[pos] = true
#else
          skip
#endif
        }
        goto next
     :: crashed -> break
     fi;
     /* The handler ran; complete(id, attempt). */
     if
     :: atomic { !crashed ->
#ifndef BUG_NO_FENCE
          if
          :: lease[pos] == my && lease_st[pos] == LIVE -> lease_st[pos] = CLOSING; closing = true
          :: else -> closing = false   /* fenced: its lease ended, another attempt holds the job */
          fi
#else
          lease_st[pos] = CLOSING; closing = true
#endif
        }
     :: crashed -> break
     fi;
     if
     :: closing ->
        if
        :: atomic { !crashed ->
             assert(outcome[pos] == 0);       /* completed once */
             assert(attempts[pos] == my);     /* by the newest attempt */
             outcome[pos] = my; oseg[pos] = ROWSEG(pos); lease[pos] = 0; lease_st[pos] = NONE }
        :: atomic { !crashed -> lease_st[pos] = LIVE }   /* the completion rolled back */
        :: crashed -> break
        fi
     :: else -> skip
     fi;
next:
     skip;
     d_step { pos = 0; my = 0; closing = false }
  od
}

/* Time passes: a lease ends and its job is offered again; the current
   segment is sealed and the next one takes the appends (at any time, as a
   full segment does, also in the middle of a carry). */
proctype Clock() {
  byte j;
  do
  :: crashed -> break
  :: atomic { !crashed ->
       j = 0;
       do
       :: j < J - 1 -> j++
       :: break
       od;
       if
       :: lease_st[j] == LIVE -> expired[j] = true; lease[j] = 0; lease_st[j] = NONE; ready[j] = true
       :: else -> skip
       fi;
       j = 0 }
  :: atomic { !crashed && cur < NSEG - 1 -> cur++ }   /* the current segment is sealed */
  :: break
  od
}

/* Maintenance: truncates the oldest segment once every entry in it is
   finished or carried; carries a job forward out of the oldest sealed
   segment. */
proctype Maintenance() {
  byte s, k, cj = NIL, cs, cb, carries = 0;
  bool ok, cr;
  do
  :: crashed -> break
  :: atomic { !crashed ->
       /* The oldest segment not truncated. */
       s = 0;
       do
       :: s < NSEG - 1 && truncated[s] -> s++
       :: else -> break
       od;
#if defined(BUG_TRUNCATE_OUT_OF_ORDER) || defined(ROWS_WITH_ENTRY)
       do   /* or any later one (as built: any sealed segment whose jobs are done) */
       :: s < NSEG - 1 -> s++
       :: break
       od;
#endif
       /* Sealed, not yet truncated, no open carry writing in it. */
       ok = s < cur && !truncated[s];
       k = 0;
       do
       :: ok && k < J ->
          if
          :: entry_st[k] != NONE && (eseg[k] == s || cseg[k] == s) ->
#ifndef BUG_TRUNCATE_EARLY
             ok = entry_st[k] == ABORTED || outcome[k] != 0 || (cseg[k] != NIL && cseg[k] > s)
#else
             ok = entry_st[k] == ABORTED || (entry_st[k] == COMMITTED && k < cursor && !ready[k] && !passed[k])
#endif
          :: else -> skip
          fi;
          k++
       :: else -> break
       od;
       if
       :: ok ->
          truncated[s] = true;
          /* The rebuild still sees what it needs of every job. */
          k = 0;
          do
          :: k < J ->
             view(k);
             assert(entry_st[k] != INPROG || eseg[k] != s);
             assert(entry_st[k] != COMMITTED || outcome[k] != 0 || h_ent);
             assert(!(entry_st[k] == COMMITTED && LIVE_LEASE(k)) || h_rc == receipt[k]);
             assert(outcome[k] == 0 || !h_ent || h_fin);
             k++
          :: else -> break
          od;
          h_ent = false; h_copy = false; h_base = 0; h_rc = 0; h_fin = false
       :: else -> skip
       fi;
       s = 0; k = 0; ok = false }
  :: atomic { !crashed && carries < MAXCARRY ->
       carries++;
       /* Under the lane's and the lease map's lock: a job whose newest entry
          lies in the oldest sealed segment, running (its lease live, no
          completion in flight) or waiting in the lane; its rows appended to
          the current segment. */
       s = 0;
       do
       :: s < NSEG - 1 && truncated[s] -> s++
       :: else -> break
       od;
       cj = 0;
       do
       :: cj < J - 1 -> cj++
       :: break
       od;
       if
       :: s < cur && entry_st[cj] == COMMITTED && NEWEST(cj) == s && lease_st[cj] == LIVE ->
          cs = cur; cb = lease[cj]; cr = true
       :: s < cur && entry_st[cj] == COMMITTED && NEWEST(cj) == s && lease_st[cj] == NONE &&
          (ready[cj] || passed[cj] || (cj >= cursor && !moved[cj])) ->
          cs = cur; cb = receipt[cj]; cr = false;
          ready[cj] = false; passed[cj] = false; moved[cj] = true; lease_st[cj] = CARRYING
       :: else -> cj = NIL
       fi;
       s = 0 }
     if
     :: cj == NIL -> skip
     :: atomic { cj != NIL && !crashed ->   /* commits */
#ifdef BUG_CARRY_UNLOCKED
          cs = cur;   /* its rows appended only now, in the segment now current */
#endif
          cseg[cj] = cs; cbase[cj] = cb;
#ifndef BUG_CARRY_WITHOUT_RECEIPT
          if
          :: cr && receipt[cj] == cb -> rcseg[cj] = cs
          :: else -> skip
          fi;
#endif
          if
          :: lease_st[cj] == CARRYING -> lease_st[cj] = NONE; ready[cj] = true
          :: else -> skip
          fi }
     :: atomic { cj != NIL && !crashed ->   /* aborts */
          if
          :: lease_st[cj] == CARRYING -> lease_st[cj] = NONE; ready[cj] = true
          :: else -> skip
          fi }
     :: cj != NIL && crashed -> break
     fi;
     d_step { cj = NIL; cs = 0; cb = 0; cr = false }
  :: break
  od
}

#ifdef TAKEBACK
/* The lane is taken back once, at any point where it is idle -- no lease
   claimed, held or closing (ADR 0028 "Shares of the server, as built") --
   and built again from the rows while producers may still be in progress:
   the cursor just after the last entry a receipt or closure names; behind
   it, a committed entry with neither is given back and an in-progress one
   is passed; ahead of it, everything is left for the cursor. (MAXCARRY 0.) */
proctype TakeBack() {
  byte i, last;
  bool idle;
  if
  :: atomic {
       !crashed ->
       idle = true;
       i = 0;
       do
       :: i < J -> idle = idle && lease_st[i] == NONE; i++
       :: else -> break
       od;
       if
       :: idle ->
          last = NIL;
          i = 0;
          do
          :: i < n ->
             view(i);
             if
             :: h_ent && (h_rc != 0 || h_fin) -> last = i
             :: else -> skip
             fi;
             i++
          :: else -> break
          od;
          i = 0;
          do
          :: i < n ->
             view(i);
             attempts[i] = (h_rc > h_base -> h_rc : h_base);
             if
             :: entry_st[i] == INPROG ->
                ready[i] = false;
#ifndef BUG_REBUILD_PASSES_AHEAD
                passed[i] = (last != NIL && i < last)
#else
                passed[i] = true
#endif
             :: else ->
                passed[i] = false;
                ready[i] = (last != NIL && i <= last && h_ent && !h_fin)
             fi;
             i++
          :: else -> break
          od;
          cursor = (last == NIL -> 0 : last + 1);
          h_ent = false; h_copy = false; h_base = 0; h_rc = 0; h_fin = false
       :: else -> skip
       fi;
       i = 0; last = 0; idle = false }
  :: skip
  fi
}
#endif

/* The server crashes once, at any point, or never. */
proctype Crash() {
  byte i;
  if
  :: atomic {
       crashed = true;
       i = 0;
       do
       :: i < J ->
          if
          :: entry_st[i] == INPROG -> entry_st[i] = ABORTED
          :: else -> skip
          fi;
          /* Rebuilt from the rows not truncated: a job's newest entry, the
             receipts after it and its closure. A live receipt holds its
             job; an entry with no closure and no live receipt is ready. */
          view(i);
          passed[i] = false; moved[i] = false;
          attempts[i] = (h_rc > h_base -> h_rc : h_base);
          if
          :: h_ent && !h_fin && h_rc != 0 && !expired[i] ->
             lease[i] = h_rc; lease_st[i] = LIVE; ready[i] = false
          :: h_ent && !h_fin && !(h_rc != 0 && !expired[i]) ->
             lease[i] = 0; lease_st[i] = NONE; ready[i] = true
          :: else -> lease[i] = 0; lease_st[i] = NONE; ready[i] = false
          fi;
          i++
       :: else -> break
       od;
       h_ent = false; h_copy = false; h_base = 0; h_rc = 0; h_fin = false;
       cursor = n;
       i = 0 }
  :: skip
  fi
}

init {
  byte i, pos, my;
  atomic {
    i = 0;
    do
    :: i < J -> entry_st[i] = NONE; lease_st[i] = NONE; cseg[i] = NIL; rcseg[i] = NIL; i++
    :: else -> break
    od;
    i = 0;
    do
    :: i < J -> run Producer(); i++
    :: else -> break
    od;
    run Claimer(R1); run Claimer(R2);
    run Clock(); run Maintenance(); run Crash();
#ifdef TAKEBACK
    run TakeBack()
#endif
  }
  (_nr_pr == 1);   /* every other process has ended */
  /* After a crash the server is back; either way, time passes: every
     lease ends and its job is offered again. Then one drain. */
  crashed = false;
  i = 0;
  do
  :: i < J ->
     if
     :: lease_st[i] == LIVE -> expired[i] = true; lease[i] = 0; lease_st[i] = NONE; ready[i] = true
     :: else -> assert(lease_st[i] == NONE)
     fi;
     i++
  :: else -> break
  od;
  do
  :: atomic { pick(pos); if :: pos != NIL -> my = lease[pos] :: else -> skip fi }
     if
     :: pos == NIL -> break
     :: else ->
        receipt[pos] = my; rseg[pos] = ROWSEG(pos); rcseg[pos] = NIL; expired[pos] = false; lease_st[pos] = LIVE;
        assert(outcome[pos] == 0 && attempts[pos] == my);
        outcome[pos] = my; oseg[pos] = ROWSEG(pos); lease[pos] = 0; lease_st[pos] = NONE
     fi
  od;
  /* No committed job lost. */
  i = 0;
  do
  :: i < J -> assert(entry_st[i] != COMMITTED || outcome[i] != 0); i++
  :: else -> break
  od
}
