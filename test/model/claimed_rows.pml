/*
 * Rows claimed onto the rings (issue 33, ADR 0028 "Rows claimed onto the
 * rings"), as a Promela model for SPIN: the path a job takes once it has
 * left its ring's entry (a lease expired, a retry, a later run_at) and
 * waits as a row of pgq.job_rows.
 *
 * What is modelled: J jobs, each a committed pending row to begin with
 * (its attempts spent kept in it). A claimer takes a row under its lock
 * (FOR UPDATE SKIP LOCKED) and, in the same transaction, deletes it and
 * appends an entry 'a' -- the job's entry and its claim's receipt in one
 * row -- to the ring's current segment, entering its lease (attempt = the
 * row's + 1) at once, owned by the claiming transaction; the claim commits
 * (the row gone, the 'a' and the lease live) or aborts (the row back, the
 * 'a' dead, the lease dropped). The holder completes (fenced by the lease
 * map: its attempt, a lease that holds) and commits or rolls back; a
 * completion of an attempt whose lease expired and whose job waits as a row
 * again lands through the row (ADR 0003) unless a claim took the row since
 * (a claim in progress holds the row's lock: the completion waits for it,
 * as the engine waits for the claim's transaction). Time ends leases: the
 * maintenance closes the 'a' (its closure names it) and inserts the row
 * again, with the attempt spent, in one transaction. Segments are sealed
 * in turn (the last never) and any sealed one is truncated once every 'a'
 * in it is closed and none is being written (AllClosed). The server
 * crashes once at any point: open transactions abort, row locks go, the
 * lease map is rebuilt from the 'a' rows and their closures in the
 * segments not truncated.
 *
 * What is checked (assert): a job is completed at most once and only by
 * its current attempt (a fenced completion never lands); a claim never
 * takes a job whose lease is live or that is finished (one holder); a
 * truncated segment holds no 'a' of a live lease; and, after every process
 * has ended and the leases have run out, a drain completes every job (none
 * lost).
 *
 * Planted bugs (each must make the check fail; test/model/check.sh):
 *   BUG_KEEP_ROW            the claim updates the row instead of deleting it
 *                           (the 2.x claim beside the new entry): claimed twice
 *   BUG_TRUNCATE_IGNORES_A  AllClosed counts 'e' entries only: a segment with a
 *                           running 'a' is truncated and its job is lost
 *   BUG_REBUILD_SKIPS_A     the rebuild enters no lease for an 'a': a job running
 *                           at the crash is neither running nor a row after it
 *   BUG_CURSOR_TAKES_A      the ring's cursor hands out a committed 'a' as if it
 *                           were an entry 'e': a second holder
 *   BUG_NO_FENCE            a completion does not check its attempt
 *
 * Bounds (macros): J jobs, claimers taking R1 and R2 jobs (a claim and,
 * for each, a completion), NSEG segments, one crash, leases ending at any
 * time.
 */

#ifndef J
#define J 2
#endif
#ifndef NSEG
#define NSEG 3
#endif
#ifndef R1
#define R1 2
#endif
#ifndef R2
#define R2 1
#endif

mtype = { NONE, INPROG, COMMITTED, ABORTED, CLAIMING, LIVE, CLOSING };

/* Durable: pgq.job_rows and the ring's 'a' rows (the newest per job: an
   older one is closed, and its closure names it, not the newer one). */
bool row[J];           /* a pending row (committed, not deleted) */
byte row_att[J];       /* the attempts it has spent */
mtype a_st[J];         /* the newest 'a': NONE, INPROG, COMMITTED, ABORTED */
byte a_att[J];         /* its attempt */
byte aseg[J];          /* its segment */
bool a_closed[J];      /* a committed closure names it */
byte outcome[J];       /* the attempt that completed the job; 0 none */
byte cur = 0;          /* the segment taking appends */
bool truncated[NSEG];

/* Transactions and shared memory: lost in a crash. */
byte row_lock[J];      /* the claimer (1, 2) holding the row's lock; 0 none */
byte lease[J];         /* the attempt the lease map holds; 0 none */
mtype lease_st[J];     /* NONE, CLAIMING (the claim not committed), LIVE, CLOSING */
byte attempts[J];      /* attempts handed out */

bool crashed = false;

#define LIVE_LEASE(j) (a_st[j] == COMMITTED && !a_closed[j] && !truncated[aseg[j]])

/* A claim: a row no one holds, locked, taken onto the ring. */
inline claim_row(me, pos) {
  pos = 255;
  i = 0;
  do
  :: i < J && pos == 255 && row[i] && row_lock[i] == 0 -> pos = i
  :: i < J && pos == 255 && !(row[i] && row_lock[i] == 0) -> i++
#ifdef BUG_CURSOR_TAKES_A
  :: i < J && pos == 255 && a_st[i] == COMMITTED && !a_closed[i] -> pos = i
#endif
  :: else -> break
  od;
  if
  :: pos != 255 ->
     assert(outcome[pos] == 0);      /* never a finished job */
     assert(!LIVE_LEASE(pos));       /* never while a lease on it holds */
     assert(lease_st[pos] == NONE);  /* nor while another claim has it */
     attempts[pos] = row_att[pos] + 1;
     row_lock[pos] = me;
     a_st[pos] = INPROG; a_att[pos] = attempts[pos]; aseg[pos] = cur; a_closed[pos] = false;
     lease[pos] = attempts[pos]; lease_st[pos] = CLAIMING
  :: else -> skip
  fi;
  i = 0
}

proctype Claimer(byte me; byte rounds) {
  byte pos, my, i, done = 0;
  bool closing;
  do
  :: crashed || done == rounds -> break
  :: !crashed && done < rounds ->
     done++;
     if
     :: atomic { !crashed -> claim_row(me, pos); if :: pos != 255 -> my = lease[pos] :: else -> skip fi }
     :: crashed -> break
     fi;
     if
     :: pos == 255 -> break
     :: else -> skip
     fi;
     /* The claim's transaction ends. */
     if
     :: atomic { !crashed ->
#ifndef BUG_KEEP_ROW
          row[pos] = false;
#endif
          row_lock[pos] = 0; a_st[pos] = COMMITTED; lease_st[pos] = LIVE }
     :: atomic { !crashed ->   /* the attempt it drew was never committed */
          row_lock[pos] = 0; a_st[pos] = ABORTED; lease[pos] = 0; lease_st[pos] = NONE;
          attempts[pos] = row_att[pos] }
        goto next
     :: crashed -> break
     fi;
     /* complete(id, my): on the ring while its lease holds; else through
        the row, if the job waits as a row with this attempt spent and no
        claim holds it (a claim in progress is waited for). */
     if
     :: atomic { !crashed ->
#ifndef BUG_NO_FENCE
          if
          :: lease[pos] == my && lease_st[pos] == LIVE -> lease_st[pos] = CLOSING; closing = true
          :: else -> closing = false
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
             assert(outcome[pos] == 0);
             assert(attempts[pos] == my);
             outcome[pos] = my; a_closed[pos] = true; lease[pos] = 0; lease_st[pos] = NONE }
        :: atomic { !crashed -> lease_st[pos] = LIVE }   /* rolled back */
        :: crashed -> break
        fi
     :: !closing ->
        if
        :: atomic { !crashed && row_lock[pos] == 0 ->
             if
             :: row[pos] && row_att[pos] == my ->   /* the late completion lands */
                assert(outcome[pos] == 0);
                assert(attempts[pos] == my);
                outcome[pos] = my; row[pos] = false
             :: else -> skip   /* fenced: claimed again, or finished */
             fi }
        :: crashed -> break
        fi
     fi;
next:
     skip;
     d_step { pos = 0; my = 0; closing = false }
  od
}

/* Time: a lease ends (the maintenance closes its 'a' and inserts the row
   again, one transaction); a segment is sealed; a sealed segment whose
   'a' rows are all closed, none being written, is truncated. */
proctype Clock() {
  byte j, s;
  bool ok;
  do
  :: crashed -> break
  :: atomic { !crashed ->
       j = 0;
       do
       :: j < J - 1 -> j++
       :: break
       od;
       if
       :: lease_st[j] == LIVE ->
          a_closed[j] = true; row[j] = true; row_att[j] = lease[j]; lease[j] = 0; lease_st[j] = NONE
       :: else -> skip
       fi;
       j = 0 }
  :: atomic { !crashed && cur < NSEG - 1 -> cur++ }
  :: atomic { !crashed ->
       s = 0;
       do
       :: s < NSEG - 1 -> s++
       :: break
       od;
       ok = s < cur && !truncated[s];
       j = 0;
       do
       :: ok && j < J ->
#ifndef BUG_TRUNCATE_IGNORES_A
          ok = !(aseg[j] == s && (a_st[j] == INPROG || (a_st[j] == COMMITTED && !a_closed[j])));
#endif
          j++
       :: else -> break
       od;
       if
       :: ok ->
          truncated[s] = true;
          j = 0;
          do
          :: j < J -> assert(!(lease_st[j] != NONE && aseg[j] == s && a_st[j] == COMMITTED)); j++
          :: else -> break
          od
       :: else -> skip
       fi;
       s = 0; j = 0; ok = false }
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
          :: a_st[i] == INPROG -> a_st[i] = ABORTED; attempts[i] = row_att[i]
          :: else -> skip
          fi;
          row_lock[i] = 0;
          /* Rebuilt from the rows: an 'a' not closed runs with its attempt. */
          if
#ifndef BUG_REBUILD_SKIPS_A
          :: LIVE_LEASE(i) -> lease[i] = a_att[i]; lease_st[i] = LIVE; attempts[i] = a_att[i]
#endif
          :: else -> lease[i] = 0; lease_st[i] = NONE
          fi;
          i++
       :: else -> break
       od;
       i = 0 }
  :: skip
  fi
}

init {
  byte i, pos, my;
  atomic {
    i = 0;
    do
    :: i < J -> row[i] = true; row_att[i] = 1; a_st[i] = NONE; lease_st[i] = NONE; i++
    :: else -> break
    od;
    run Claimer(1, R1); run Claimer(2, R2); run Clock(); run Crash()
  }
  (_nr_pr == 1);
  /* Back after a crash, if any; every lease ends; one drain. */
  crashed = false;
  i = 0;
  do
  :: i < J ->
     if
     :: lease_st[i] == LIVE ->
        a_closed[i] = true; row[i] = true; row_att[i] = lease[i]; lease[i] = 0; lease_st[i] = NONE
     :: else -> assert(lease_st[i] == NONE)
     fi;
     i++
  :: else -> break
  od;
  do
  :: atomic { claim_row(3, pos); if :: pos != 255 -> my = lease[pos] :: else -> skip fi }
     if
     :: pos == 255 -> break
     :: else ->
        row[pos] = false; row_lock[pos] = 0; a_st[pos] = COMMITTED; lease_st[pos] = LIVE;
        assert(outcome[pos] == 0 && attempts[pos] == my);
        outcome[pos] = my; a_closed[pos] = true; lease[pos] = 0; lease_st[pos] = NONE
     fi
  od;
  /* No job lost. */
  i = 0;
  do
  :: i < J -> assert(outcome[i] != 0); i++
  :: else -> break
  od
}
