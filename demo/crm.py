"""The demo's CRM scene: pgq's coordination primitives under real concurrency.

The same database that sends the welcome emails (scenario.py) runs the sales
team's CRM: step 4 of the story in scenario.py's docstring, printed as
section 3. Each race is run by several connections released at once by a
barrier:

  3a. New WhatsApp conversations go to 4 sellers in turn with pgq.assign: a
      customer writing twice gets one seller, a seller at lunch gets nothing
      new, turns go by id.
  3b. Delivery receipts arrive out of order and some twice: pgq.advance only
      climbs, and a late receipt gets the stored step back.
  3c. Two operators set the AI agent at the same moment: pgq.set_switch, the
      write that commits last wins and every screen shows it.
  3d. An invitation is accepted on two devices at once: pgq.once returns true
      once, and one membership row is written.

crm_scene() runs it all and returns its checks, (label, value, ok, note), for
scenario.py's summary; an error in a thread goes to the scenario's
Shared.record_error (the only part of Shared used here) and fails the demo.
"""

import random
import threading
import time

from common import BOLD, DIM, RESET, connect, out, print_table

TEAM = "sellers"
SELLERS = ["ana", "bruno", "carla", "diego"]    # ids in this order: turns go by id
LUNCH_SELLER = "bruno"
INBOXES = 3                 # connections receiving WhatsApp messages
ROUNDS = 12                 # each inbox receives one message per round, all at once
LUNCH_FROM, LUNCH_UNTIL = 4, 8                  # rounds 5-8 (1-based): at lunch
TWICE = {1: (0, 1), 5: (1, 2), 9: (0, 2), 11: (1, 2)}  # round -> two inboxes, one customer
FOLLOW_UP = (6, 0)          # round, inbox: a customer of the seller at lunch writes again
WEBHOOKS = 3                # connections receiving delivery receipts
MESSAGES = {f"msg:wamid.{4100 + k}": top for k, top in enumerate([3, 3, 2, 3, 1, 3, 2, 3])}
STEP_NAMES = {1: "sent", 2: "delivered", 3: "read"}
SWITCH = "agent:whatsapp"
OPERATORS = [("ana", True), ("diego", False)]   # both flip the AI agent at the same moment
SWITCH_RACES = 3
INVITES = {"7F3K": "emma@example.com", "Q2WX": "felix@example.com", "M9PD": "gina@example.com"}
DEVICES = ["phone", "laptop"]  # the invitee taps "accept" on both at once
HOLD = 0.1                  # seconds a winner keeps its transaction open after the call
ROUND_PACE = 0.05           # seconds between two rounds of WhatsApp messages
CRM_TIMEOUT = 20            # seconds; the whole scene takes about 2

CRM_SCHEMA = f"""
DROP TABLE IF EXISTS memberships;
DELETE FROM pgq.teams WHERE name = '{TEAM}';          -- its members and assignments too
DELETE FROM pgq.switches WHERE name = '{SWITCH}';
DELETE FROM pgq.ladders WHERE subject LIKE 'msg:%';
DELETE FROM pgq.once_keys WHERE key LIKE 'invite:%';
-- Written in the same transaction as pgq.once. No unique constraint on
-- purpose: the checks count rows instead.
CREATE TABLE memberships (
    invite_code text        NOT NULL,
    email       text        NOT NULL,
    device      text        NOT NULL,
    joined_at   timestamptz NOT NULL DEFAULT now()
);
"""


class Crm:
    """What the CRM threads record, and what the barrier actions saw."""

    def __init__(self):
        self.lock = threading.Lock()
        self.arrivals = []       # (round, inbox, subject, owner)
        self.round = -1          # the inbox round about to start
        self.lunch = None        # (turn when deactivated, turn when reactivated)
        self.lunch_stored = []   # what set_member_active returned
        self.follow_up = None    # a conversation the seller at lunch owned before
        self.receipts = []       # (round, webhook, message, step, returned)
        self.switch = []         # (race, operator, value, returned, xmin, waited, screen)
        self.switch_final = {}   # race -> (value, xmin) once both operators committed
        self.accepts = []        # (code, device, first, waited)


def short(subject):
    return subject.split(":", 1)[1]


def run_parties(targets):
    """Starts one thread per (target, args) and waits for all of them."""
    threads = [threading.Thread(target=t, args=a, daemon=True) for t, a in targets]
    for t in threads:
        t.start()
    deadline = time.monotonic() + CRM_TIMEOUT
    for t in threads:
        t.join(timeout=max(0.1, deadline - time.monotonic()))
    if any(t.is_alive() for t in threads):
        raise RuntimeError(f"CRM threads still running after {CRM_TIMEOUT} s")


def party(shared, who, barriers, body):
    """Runs body; on an error, breaks the barriers so that nobody waits forever."""
    try:
        body()
    except Exception as exc:  # noqa: BLE001 - reported, fails the demo
        for b in barriers:
            b.abort()
        if not isinstance(exc, threading.BrokenBarrierError):
            shared.record_error(who, exc)


def arrival_plan():
    """plan[round][inbox] = subject; FOLLOW_UP is decided when lunch starts."""
    plan = [[None] * INBOXES for _ in range(ROUNDS)]
    n = 100
    for r in range(ROUNDS):
        for i in range(INBOXES):
            pair = TWICE.get(r)
            if (r, i) == FOLLOW_UP:
                continue
            if pair and i == pair[1]:
                plan[r][i] = plan[r][pair[0]]
            else:
                n += 1
                plan[r][i] = f"conv:+34600100{n:03d}"
    return plan


def team_turn(conn):
    return conn.execute("SELECT turn FROM pgq.teams WHERE name = %s", (TEAM,)).fetchone()[0]


def before_round(crm, manager):
    """Barrier action: runs once every inbox has finished the previous round
    (so no assign is in flight) and before any of them starts the next one.
    The lunch window is therefore exactly rounds LUNCH_FROM..LUNCH_UNTIL-1."""
    crm.round += 1
    if crm.round > 0:
        time.sleep(ROUND_PACE)
    if crm.round == LUNCH_FROM:
        stored = manager.execute("SELECT pgq.set_member_active(%s, %s, false)",
                                 (TEAM, LUNCH_SELLER)).fetchone()[0]
        crm.lunch_stored.append(stored)
        crm.lunch = (team_turn(manager), None)
        crm.follow_up = manager.execute(
            "SELECT a.subject FROM pgq.assignments a JOIN pgq.teams t USING (team_id)"
            " WHERE t.name = %s AND a.owner = %s ORDER BY a.turn LIMIT 1",
            (TEAM, LUNCH_SELLER)).fetchone()[0]
        out.event("manager", f"{LUNCH_SELLER} goes to lunch: set_member_active(false) → "
                             f"{str(stored).lower()}, after turn {crm.lunch[0]}")
    elif crm.round == LUNCH_UNTIL:
        turn = team_turn(manager)
        stored = manager.execute("SELECT pgq.set_member_active(%s, %s, true)",
                                 (TEAM, LUNCH_SELLER)).fetchone()[0]
        crm.lunch_stored.append(stored)
        crm.lunch = (crm.lunch[0], turn)
        out.event("manager", f"{LUNCH_SELLER} is back: set_member_active(true) → "
                             f"{str(stored).lower()}, after turn {turn}")


def inbox(dsn, crm, shared, index, plan, barrier):
    who = f"inbox-{index + 1}"

    def body():
        with connect(dsn) as conn:
            for r in range(ROUNDS):
                barrier.wait()
                subject = plan[r][index] or crm.follow_up
                owner = conn.execute("SELECT pgq.assign(%s, %s)", (TEAM, subject)).fetchone()[0]
                with crm.lock:
                    crm.arrivals.append((r, index, subject, owner))
                if r in TWICE and index in TWICE[r]:
                    out.event(who, f"{short(subject)} writes twice at the same moment → {owner}")
                elif plan[r][index] is None:
                    out.event(who, f"{short(subject)}, {LUNCH_SELLER}'s customer, writes again "
                                   f"during lunch → {owner} (the owner stays)")

    party(shared, who, [barrier], body)


def webhook(dsn, crm, shared, index, rounds, barrier):
    who = f"webhook-{index + 1}"

    def body():
        with connect(dsn) as conn:
            for r, batch in enumerate(rounds):
                barrier.wait()
                if index >= len(batch):
                    continue
                message, step = batch[index]
                got = conn.execute("SELECT pgq.advance(%s, %s)", (message, step)).fetchone()[0]
                with crm.lock:
                    crm.receipts.append((r, index, message, step, got))

    party(shared, who, [barrier], body)


def receipt_rounds():
    """Every message's receipts up to its last step, one of them twice (a
    webhook retried), all shuffled and dealt to the webhooks round by round."""
    rng = random.Random(7)
    receipts = []
    for message, top in MESSAGES.items():
        steps = list(range(1, top + 1))
        steps.append(rng.choice(steps))
        receipts += [(message, s) for s in steps]
    rng.shuffle(receipts)
    return [receipts[i:i + WEBHOOKS] for i in range(0, len(receipts), WEBHOOKS)]


def operator(dsn, crm, shared, name, value, start, done):
    who = f"{name}'s screen"

    def body():
        with connect(dsn) as conn:
            for race in range(SWITCH_RACES):
                start.wait()
                t0 = time.monotonic()
                with conn.transaction():
                    got = conn.execute("SELECT pgq.set_switch(%s, %s)",
                                       (SWITCH, value)).fetchone()[0]
                    waited = time.monotonic() - t0
                    # The row version this transaction wrote.
                    xmin = conn.execute("SELECT xmin::text FROM pgq.switches WHERE name = %s",
                                        (SWITCH,)).fetchone()[0]
                    time.sleep(HOLD)  # e.g. an audit row, in the same transaction
                done.wait()           # both committed; the action read the final row
                screen = conn.execute("SELECT pgq.switch(%s)", (SWITCH,)).fetchone()[0]
                with crm.lock:
                    crm.switch.append((race, name, value, got, xmin, waited, screen))

    party(shared, who, [start, done], body)


def read_switch_final(crm, manager):
    crm.switch_final[len(crm.switch_final)] = manager.execute(
        "SELECT value, xmin::text FROM pgq.switches WHERE name = %s", (SWITCH,)).fetchone()


def accept_invites(dsn, crm, shared, device, barrier):
    who = device

    def body():
        with connect(dsn) as conn:
            for code, email in INVITES.items():
                barrier.wait()
                t0 = time.monotonic()
                with conn.transaction():
                    first = conn.execute("SELECT pgq.once(%s)", (f"invite:{code}",)).fetchone()[0]
                    waited = time.monotonic() - t0
                    if first:
                        conn.execute("INSERT INTO memberships (invite_code, email, device)"
                                     " VALUES (%s, %s, %s)", (code, email, device))
                        time.sleep(HOLD)  # the rest of the signup, same transaction
                with crm.lock:
                    crm.accepts.append((code, device, first, waited))

    party(shared, who, [barrier], body)


def crm_scene(dsn, conn, shared):
    """Section 3. Returns its checks for the summary: (label, value, ok, note)."""
    try:
        return crm_story(dsn, conn, shared)
    except Exception as exc:  # noqa: BLE001 - reported, fails the demo
        shared.record_error("crm", exc)
        return [("CRM scene", "error", False, str(exc))]


def crm_story(dsn, conn, shared):
    crm = Crm()
    checks = []

    def check(label, value, ok, note=""):
        checks.append((label, value, ok, note))

    out.heading("3. The same database runs the team's CRM: four races, four primitives")
    conn.execute(CRM_SCHEMA)
    ids = {s: conn.execute("SELECT pgq.add_member(%s, %s)", (TEAM, s)).fetchone()[0]
           for s in SELLERS}
    out.line(f"team '{TEAM}': " + ", ".join(f"{s} (id {i})" for s, i in ids.items())
             + "; turns go by id, round-robin")

    # --- 3a. conversations -> sellers -----------------------------------------
    plan = arrival_plan()
    out.line()
    out.line(f"{BOLD}3a. New WhatsApp conversations: pgq.assign('{TEAM}', 'conv:<phone>'){RESET}")
    out.line(f"{DIM}{INBOXES} connections × {ROUNDS} messages, each round at the same moment "
             f"(a barrier); {len(TWICE)} customers write twice at once{RESET}")
    out.restart_clock()
    with connect(dsn) as manager:
        barrier = threading.Barrier(INBOXES, action=lambda: before_round(crm, manager),
                                    timeout=CRM_TIMEOUT)
        run_parties([(inbox, (dsn, crm, shared, i, plan, barrier)) for i in range(INBOXES)])

    team = conn.execute("SELECT team_id, turn FROM pgq.teams WHERE name = %s", (TEAM,)).fetchone()
    rows = conn.execute("SELECT subject, member_id, owner, turn FROM pgq.assignments"
                        " WHERE team_id = %s ORDER BY turn", (team[0],)).fetchall()
    owner_of = {r[0]: r[2] for r in rows}
    lunch_from, lunch_until = crm.lunch if crm.lunch and crm.lunch[1] is not None else (0, 0)
    at_lunch = [r for r in rows if lunch_from < r[3] <= lunch_until]

    out.line()
    table = []
    for s in SELLERS:
        mine = [r for r in rows if r[2] == s]
        table.append((s, ids[s], len(mine), sum(1 for r in at_lunch if r[2] == s),
                      " ".join(str(r[3]) for r in mine),
                      " ".join(short(r[0])[-3:] for r in mine)))
    print_table(table, ["seller", "id", "convs", "new at lunch", "turns",
                        "conversations (+34600100…)"])
    out.line(f"{DIM}{LUNCH_SELLER} was inactive for turns {lunch_from + 1}-{lunch_until}{RESET}")

    arrivals = crm.arrivals
    distinct = {a[2] for a in arrivals}
    wrong_owner = [a for a in arrivals if owner_of.get(a[2]) != a[3]]
    check("one owner per conversation", f"{len(rows)} convs",
          len(arrivals) == INBOXES * ROUNDS and len(rows) == len(distinct) and not wrong_owner,
          f"{len(arrivals)} arrivals; every arrival of a conversation got its stored owner")
    check("turns spent", team[1], team[1] == len(distinct) == len(rows),
          "= conversations: a second message spent no turn")
    client_side = [a for a in arrivals if LUNCH_FROM <= a[0] < LUNCH_UNTIL
                   and a[3] == LUNCH_SELLER and a[2] != crm.follow_up]
    lunch_owned = [r for r in at_lunch if r[2] == LUNCH_SELLER]
    check(f"new conversations for {LUNCH_SELLER} at lunch", len(lunch_owned),
          crm.lunch_stored == [False, True] and len(at_lunch) > 0
          and not lunch_owned and not client_side,
          f"{len(at_lunch)} assigned while inactive (turns {lunch_from + 1}-{lunch_until})")
    # The fairness rule of src/core/turns.h, replayed: the first active member
    # above the last one served, else the first active member.
    cursor, unfair = 0, []
    for expected_turn, (subject, member_id, _owner, turn) in enumerate(rows, 1):
        active = sorted(i for s, i in ids.items()
                        if not (s == LUNCH_SELLER and lunch_from < turn <= lunch_until))
        expect = next((i for i in active if i > cursor), active[0])
        if turn != expected_turn or member_id != expect:
            unfair.append(turn)
        cursor = member_id
    check("turn order", "by id" if not unfair else f"turn {unfair[0]}", not unfair,
          "each turn went to the next active seller by id")

    # --- 3b. delivery receipts ---------------------------------------------------
    rounds = receipt_rounds()
    total = sum(len(b) for b in rounds)
    out.line()
    out.line(f"{BOLD}3b. Delivery receipts out of order: pgq.advance('msg:<id>', step){RESET}")
    out.line(f"{DIM}{total} receipts for {len(MESSAGES)} messages (1 sent, 2 delivered, 3 read), "
             f"shuffled, some twice, on {WEBHOOKS} connections{RESET}")
    barrier = threading.Barrier(WEBHOOKS, timeout=CRM_TIMEOUT)
    run_parties([(webhook, (dsn, crm, shared, i, rounds, barrier)) for i in range(WEBHOOKS)])
    stored = dict(conn.execute("SELECT subject, step FROM pgq.ladders WHERE subject LIKE 'msg:%'"
                               ).fetchall())
    receipts = sorted(crm.receipts)
    def by_round(mine, field):
        # Receipts of one round arrived at the same moment: in parentheses.
        groups = {}
        for r in mine:
            groups.setdefault(r[0], []).append(str(r[field]))
        return " ".join(g[0] if len(g) == 1 else "(" + " ".join(g) + ")"
                        for g in groups.values())

    table, bad_return = [], []
    for message, top in MESSAGES.items():
        mine = [r for r in receipts if r[2] == message]
        table.append((message, by_round(mine, 3), by_round(mine, 4),
                      f"{stored.get(message)} {STEP_NAMES.get(stored.get(message), '?')}"))
        # What advance may return: the highest step of the receipts of
        # earlier rounds and its own, or one arriving at the same moment.
        for r, webhook_index, _m, step, got in mine:
            before = max([step] + [x[3] for x in mine if x[0] < r])
            same = max([before] + [x[3] for x in mine if x[0] == r])
            if not before <= got <= same:
                bad_return.append((message, step, got))
    print_table(table, ["message", "receipts in arrival order", "advance returned", "stored"])
    out.line(f"{DIM}(…) = receipts of one message arriving at the same moment on two "
             f"connections{RESET}")
    late = [r for r in receipts if r[4] > r[3]]
    late.sort(key=lambda r: (r[3] != 2, r[0]))
    for _r, _w, message, step, got in late[:3]:
        out.line(f"{message}: '{STEP_NAMES[step]}' arrived after '{STEP_NAMES[got]}' → "
                 f"advance returned {got}, stays {STEP_NAMES[got]}")
    not_top = [m for m, top in MESSAGES.items() if stored.get(m) != top]
    check("ladders at their highest step", f"{len(MESSAGES) - len(not_top)}/{len(MESSAGES)}",
          not not_top and len(receipts) == total)
    check("late receipts got the stored step", len(late), bool(late) and not bad_return,
          "a lower step never moved a ladder back")

    # --- 3c. the AI-agent switch ---------------------------------------------------
    out.line()
    out.line(f"{BOLD}3c. Two operators set the AI agent at the same moment: "
             f"pgq.set_switch('{SWITCH}', value){RESET}")
    names = [o[0] for o in OPERATORS]
    out.line(f"{DIM}{names[0]} sets {str(OPERATORS[0][1]).lower()}, {names[1]} sets "
             f"{str(OPERATORS[1][1]).lower()}, {SWITCH_RACES} times, each time released "
             f"together by a barrier{RESET}")
    with connect(dsn) as manager:
        start = threading.Barrier(len(OPERATORS), timeout=CRM_TIMEOUT)
        done = threading.Barrier(len(OPERATORS), action=lambda: read_switch_final(crm, manager),
                                 timeout=CRM_TIMEOUT)
        run_parties([(operator, (dsn, crm, shared, n, v, start, done)) for n, v in OPERATORS])

    def tf(v):
        return "NULL" if v is None else str(v).lower()

    table, switch_ok = [], len(crm.switch) == len(OPERATORS) * SWITCH_RACES
    for race in range(SWITCH_RACES):
        calls = {c[1]: c for c in crm.switch if c[0] == race}
        final_value, final_xmin = crm.switch_final.get(race, (None, None))
        last = [n for n, c in calls.items() if c[4] == final_xmin]
        cells = []
        for n in names:
            c = calls.get(n)
            waited = f" (waited {c[5]:.2f} s)" if c and c[5] >= HOLD / 2 else ""
            cells.append(f"{tf(c[2])} → {tf(c[3])}{waited}" if c else "?")
        table.append((race + 1, *cells, ", ".join(last) or "?", tf(final_value),
                      " ".join(tf(calls[n][6]) if n in calls else "?" for n in names)))
        switch_ok = (switch_ok and len(last) == 1 and calls[last[0]][2] == final_value
                     and all(c[3] == c[2] and c[6] == final_value for c in calls.values()))
    print_table(table, ["race", *(f"{n} sets → gets" for n in names), "committed last",
                        "stored", "screens"])
    out.line(f"{DIM}committed last = whose transaction wrote the row version that stayed "
             f"(its xmin); each caller got back what was stored when it wrote{RESET}")
    check("AI switch: last write wins", tf(conn.execute(
        "SELECT pgq.switch(%s)", (SWITCH,)).fetchone()[0]), switch_ok,
          "final value = the write that committed last, on every screen")

    # --- 3d. an invitation accepted twice ----------------------------------------------
    out.line()
    out.line(f"{BOLD}3d. An invitation accepted twice at once: pgq.once('invite:<code>') "
             f"+ INSERT INTO memberships, one transaction{RESET}")
    barrier = threading.Barrier(len(DEVICES), timeout=CRM_TIMEOUT)
    run_parties([(accept_invites, (dsn, crm, shared, d, barrier)) for d in DEVICES])
    members = dict(conn.execute("SELECT invite_code, count(*) FROM memberships GROUP BY 1"
                                ).fetchall())
    table, once_ok = [], len(crm.accepts) == len(DEVICES) * len(INVITES)
    for code, email in INVITES.items():
        calls = {a[1]: a for a in crm.accepts if a[0] == code}
        cells = []
        for d in DEVICES:
            a = calls.get(d)
            cells.append("?" if a is None else
                         "true: joins" if a[2] else f"false (waited {a[3]:.2f} s)")
        table.append((f"invite:{code}", email, *cells, members.get(code, 0)))
        once_ok = once_ok and sum(1 for a in calls.values() if a[2]) == 1 \
            and members.get(code) == 1
    print_table(table, ["key", "invitee", *DEVICES, "memberships"])
    trues = sum(1 for a in crm.accepts if a[2])
    check("invitations accepted once", f"{trues} of {len(crm.accepts)}", once_ok,
          "exactly one true per invitation, one membership row each")
    return checks

