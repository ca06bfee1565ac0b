/*
 * The claim protocol of the queues on segment rings (issue 33; the shape of
 * docs/design/queues-on-rings.md), as a Promela model for SPIN.
 *
 * What is modelled: producers append entries (one per job) and commit or
 * abort, in any order (a late-committing enqueue); claimers take entries
 * under the lane's lock (shared memory: a cursor, the entries it passed
 * while their inserter was in progress, the entries given back) and commit
 * or abort their claim (a receipt); a completion checks the live lease of
 * its (job, attempt) and commits or aborts; leases end at any time and their
 * jobs are offered again; a sealed segment is truncated; the server crashes
 * at any point (every open transaction aborts, every backend dies, shared
 * memory is rebuilt from what is durable: entries, receipts, outcomes, and
 * time).
 *
 * What is checked (assert): a job is completed at most once and only by its
 * current attempt (a fenced completion never lands, two claims never both
 * complete); a truncated segment holds no committed job without an outcome;
 * a claim never hands out an entry of a truncated segment; and, after every
 * process has ended and the leases have run out, a drain completes every
 * committed job (none lost, a late commit not skipped).
 *
 * Planted bugs (each must make the check fail; test/model/check.sh):
 *   BUG_SKIP_INPROGRESS  the cursor passes an in-progress entry and forgets it
 *   BUG_NO_FENCE         a completion does not check its attempt
 *   BUG_NO_GIVEBACK      an aborted claim does not give its entry back
 *   BUG_TRUNCATE_EARLY   a segment is truncated once the cursor passed it
 */

#define J 3          /* jobs; entry i is job i */
#define SEGSIZE 2    /* entries 0 and 1 in segment 0, entry 2 in segment 1 */
#define NSEG 2
#define NIL 255
#define SEG(i) ((i) / SEGSIZE)

mtype = { NONE, INPROG, COMMITTED, ABORTED, CLAIMING, LIVE, CLOSING };

/* Durable: what the tables hold (and the clock). */
mtype entry_st[J];     /* the inserting transaction: NONE, INPROG, COMMITTED, ABORTED */
byte n = 0;            /* entries appended */
byte receipt[J];       /* attempt of the newest committed receipt; 0 none */
bool expired[J];       /* that receipt's lease has ended (time survives a crash) */
byte outcome[J];       /* the attempt that completed the job; 0 none */
bool truncated[NSEG];

/* Shared memory: lost in a crash, rebuilt from the above. */
byte cursor = 0;
bool passed[J];        /* passed by the cursor while its inserter was in progress */
bool ready[J];         /* given back: an aborted claim, an ended lease, a rebuild */
byte lease[J];         /* the attempt holding the job; 0 none */
mtype lease_st[J];     /* NONE, CLAIMING (claim not committed), LIVE, CLOSING (completion in flight) */
byte attempts[J];      /* attempts handed out */

bool crashed = false;

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
     :: entry_st[cursor] == INPROG ->
#ifndef BUG_SKIP_INPROGRESS
        passed[cursor] = true
#else
        skip
#endif
     :: entry_st[cursor] == COMMITTED -> pos = cursor
     :: entry_st[cursor] == ABORTED -> skip
     fi;
     cursor++
  :: else -> break
  od;
  if
  :: pos != NIL ->
     assert(!truncated[SEG(pos)]);   /* never hand out a reclaimed entry */
     assert(outcome[pos] == 0);       /* never hand out a finished job */
     attempts[pos]++;
     lease[pos] = attempts[pos];
     lease_st[pos] = CLAIMING
  :: else -> skip
  fi;
  i = 0
}

proctype Producer() {
  byte me;
  if
  :: atomic { !crashed -> me = n; entry_st[me] = INPROG; n++ }
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

proctype Claimer() {
  byte pos, my, i, rounds = 0;
  bool closing;
  do
  :: crashed -> break          /* a crash ends every backend */
  :: rounds == 2 -> break      /* bounded: attempts stay small */
  :: !crashed && rounds < 2 ->
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
     /* The claim's transaction ends. */
     if
     :: atomic { !crashed -> receipt[pos] = my; expired[pos] = false; lease_st[pos] = LIVE }
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
             outcome[pos] = my; lease[pos] = 0; lease_st[pos] = NONE }
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

/* A lease ends (time passes) and its job is offered again. */
proctype Expirer() {
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
  :: break
  od
}

/* Maintenance truncates a sealed segment whose entries are all finished. */
proctype Truncater() {
  byte s, k;
  bool ok;
  do
  :: crashed -> break
  :: atomic { !crashed ->
       s = 0;
       do
       :: s < NSEG - 1 -> s++
       :: break
       od;
       ok = !truncated[s] && n >= (s + 1) * SEGSIZE;   /* sealed: the next one takes appends */
       k = s * SEGSIZE;
       do
       :: ok && k < (s + 1) * SEGSIZE ->
#ifndef BUG_TRUNCATE_EARLY
          ok = entry_st[k] == ABORTED || (entry_st[k] == COMMITTED && outcome[k] != 0);
#else
          ok = entry_st[k] == ABORTED || (entry_st[k] == COMMITTED && k < cursor && !ready[k] && !passed[k]);
#endif
          k++
       :: else -> break
       od;
       if
       :: ok ->
          k = s * SEGSIZE;
          do
          :: k < (s + 1) * SEGSIZE ->
             assert(entry_st[k] != INPROG && (entry_st[k] != COMMITTED || outcome[k] != 0));
             k++
          :: else -> break
          od;
          truncated[s] = true
       :: else -> skip
       fi;
       s = 0; k = 0; ok = false }
  :: break
  od
}

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
          /* Rebuilt from the durable state: a committed receipt whose
             lease has not ended holds its job; a committed entry with no
             outcome and no such receipt is ready. */
          passed[i] = false;
          attempts[i] = receipt[i];
          if
          :: entry_st[i] == COMMITTED && outcome[i] == 0 && receipt[i] != 0 && !expired[i] ->
             lease[i] = receipt[i]; lease_st[i] = LIVE; ready[i] = false
          :: entry_st[i] == COMMITTED && outcome[i] == 0 && !(receipt[i] != 0 && !expired[i]) ->
             lease[i] = 0; lease_st[i] = NONE; ready[i] = true
          :: else -> lease[i] = 0; lease_st[i] = NONE; ready[i] = false
          fi;
          i++
       :: else -> break
       od;
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
    :: i < J -> entry_st[i] = NONE; lease_st[i] = NONE; i++
    :: else -> break
    od;
    run Producer(); run Producer(); run Producer();
    run Claimer(); run Claimer();
    run Expirer(); run Truncater(); run Crash()
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
        receipt[pos] = my; lease_st[pos] = LIVE;
        assert(outcome[pos] == 0 && attempts[pos] == my);
        outcome[pos] = my; lease[pos] = 0; lease_st[pos] = NONE
     fi
  od;
  /* No committed job lost. */
  i = 0;
  do
  :: i < J -> assert(entry_st[i] != COMMITTED || outcome[i] != 0); i++
  :: else -> break
  od
}
