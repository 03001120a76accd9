#!/usr/bin/env python3
"""Explicit-state model check of nl_pool's park/wake protocol (netlib/src/nl_pool.c).

What it checks: every interleaving of a few producers, workers and (optionally) a shutdown
caller, one step per atomic operation of the C code (ring_push, ring_pop, ring_peek,
pool_wake_one, worker_spin, worker_park, worker_try_retire, pool_maybe_grow, the NL_POOL_WAIT
path, nl_pool_shutdown). In every state: no task popped twice. In every final state: no
published task left in the ring with every worker asleep (a lost wake-up), no producer stuck,
and after shutdown every accepted task run (DRAIN) or cancelled (DISCARD) and every worker
gone. --liveness adds: from every state, a finished state can still be reached.

How: breadth-first search over states. futex_wait checks and sleeps in one step; futex_wake
wakes any n sleepers (every choice is explored). Time is abstract: each timestamp written to
spin_beat_ns or waking_ns is a fresh token, and is_recent() on it may answer true or false,
but once false it stays expired until rewritten.

What it does not check: the C11 memory model (every atomic is treated as seq_cst; the relaxed
ones were reasoned about by hand, see ring_pop's claim), more than 3 workers or 2 producers
in reasonable memory, EINTR, completions, the high-water mark, and task run times (a running
worker always comes back for more). It is a transcription: a change to the protocol in
nl_pool.c needs the same change here, then a run of the configurations below.

Usage: pool_model.py [--workers N] [--producers N] [--tasks N] [--cap N]
                     [--shutdown drain|discard] [--wait] [--burst] [--strict] [--liveness]
                     [--no-spin] [--mutant NAME[,NAME]]
  Exit 0: no violation; 1: a violation, printed as a step-by-step trace; 2: state limit.
  --mutant puts a bug in, to show the checker is not vacuous: clear_before_epoch (worker_park's
  old order, which hung bench_pool once) and no_recheck (park without re-checking the ring)
  must be found; no_handon, retire_no_peek, no_clear_after_epoch, wake_parked0 are others.
Configurations checked (states; about 1 GB of memory and a minute per million states):
  --workers 2 --tasks 2 --liveness (476k; ctest runs this one), --workers 2 --tasks 3 (1.6M),
  --workers 2 --producers 2 --tasks 1 (6.4M), --cap 1 --tasks 3 (1.9M), --wait --cap 1
  (1.3M), --shutdown drain (5.7M), --shutdown discard --tasks 1 --liveness (1.5M), --burst
  --strict --liveness (0.5M), --workers 3 --tasks 1 --no-spin --strict (0.6M).
"""
import argparse
import sys
from collections import deque

ap = argparse.ArgumentParser()
ap.add_argument('--workers', type=int, default=2)
ap.add_argument('--producers', type=int, default=1)
ap.add_argument('--tasks', type=int, default=2, help='tasks per producer')
ap.add_argument('--cap', type=int, default=4)
ap.add_argument('--shutdown', choices=['none', 'drain', 'discard'], default='none')
ap.add_argument('--wait', action='store_true', help='producers use NL_POOL_WAIT when full')
ap.add_argument('--burst', action='store_true', help='core_threads=1, max_threads=workers: keepalive timeouts, retire, pool_maybe_grow')
ap.add_argument('--strict', action='store_true', help='also flag: task queued, producers done, a worker asleep, all others inside a task')
ap.add_argument('--liveness', action='store_true', help='also check AG EF done')
ap.add_argument('--no-spin', action='store_true', help='workers never win the spin CAS')
ap.add_argument('--max-states', type=int, default=20_000_000)
ap.add_argument('--mutant', default='', help='comma list of deliberate bugs to validate the checker')
args = ap.parse_args()
MUT = set(filter(None, args.mutant.split(',')))

C = args.cap
NW, NP, NT = args.workers, args.producers, args.tasks
NTASKS = NP * NT
SHUT = args.shutdown
NTHR = NP + NW + (1 if SHUT != 'none' else 0)

# shared state indices
(ENQ, CLOSED, DEQ, SEQ, JOB, PARKED, EPOCH, WAKING, BEAT, FW, FEPOCH, DISC, POPPED,
 EXPIRED, ACCEPTED, NTHREADS, IDLE, LOCK, SHUTTING) = range(19)
CORE = 1 if args.burst else NW


def initial():
    sh = [0, 0, 0, tuple(2 * i for i in range(C)), tuple([-1] * C), 0, 0, 0, 0, 0, 0, 0,
          tuple([0] * NTASKS), frozenset(), tuple([0] * NTASKS), CORE, 0, -1, 0]
    thr = []
    for p in range(NP):
        thr.append(('P', 'next', (('i', -1),)))
    for w in range(NW):
        thr.append(('W', 'top', ()) if w < CORE else ('W', 'empty', ()))
    if SHUT != 'none':
        thr.append(('S', 'start', ()))
    return canon(tuple(sh), tuple(thr))


TOKEN_LOCALS = ('b', 'sent')


def canon(sh, thr):
    """Renumber time tokens in order of appearance; drop expiry of unreferenced tokens."""
    order = {}
    def see(v):
        if v and v not in order:
            order[v] = len(order) + 1
    see(sh[BEAT]); see(sh[WAKING])
    for (_, _, loc) in thr:
        for k, v in loc:
            if k in TOKEN_LOCALS:
                see(v)
    m = lambda v: order[v] if v else 0
    sh = list(sh)
    sh[BEAT] = m(sh[BEAT]); sh[WAKING] = m(sh[WAKING])
    sh[EXPIRED] = frozenset(order[t] for t in sh[EXPIRED] if t in order)
    nthr = []
    for (kind, pc, loc) in thr:
        nthr.append((kind, pc, tuple((k, m(v) if k in TOKEN_LOCALS else v) for k, v in loc)))
    return (tuple(sh), tuple(nthr))


def fresh(sh, thr):
    used = {sh[BEAT], sh[WAKING]}
    for (_, _, loc) in thr:
        for k, v in loc:
            if k in TOKEN_LOCALS:
                used.add(v)
    return max(used) + 1


def recent_choices(sh, tok):
    """is_recent(tok): list of (answer, new_expired_set)."""
    if tok == 0 or tok in sh[EXPIRED]:
        return [(False, sh[EXPIRED])]
    return [(True, sh[EXPIRED]), (False, sh[EXPIRED] | {tok})]


def is_published(sh, pos):
    return sh[SEQ][pos % C] == 2 * pos + 1


class Ctx:
    """Builds successor states for one thread step."""
    def __init__(self, sh, thr, tid):
        self.sh0, self.thr0, self.tid = sh, thr, tid
        self.out = []

    def emit(self, label, sh, pc, loc, extra_thr=None):
        thr = list(self.thr0)
        kind = thr[self.tid][0]
        thr[self.tid] = (kind, pc, tuple(sorted(loc.items())))
        if extra_thr:
            for t, v in extra_thr.items():
                thr[t] = v
        self.out.append((label, canon(tuple(sh), tuple(thr))))


def futex_wake_choices(thr, word, n):
    """Which blocked threads a futex_wake(word, n) wakes: every subset of size min(n, #blocked)."""
    blocked = [i for i, (k, pc, loc) in enumerate(thr) if pc == 'blocked' and dict(loc)['word'] == word]
    from itertools import combinations
    k = min(n, len(blocked))
    res = []
    for comb in combinations(blocked, k):
        upd = {}
        for i in comb:
            kind, pc, loc = thr[i]
            d = dict(loc)
            upd[i] = (kind, d['after'], tuple(sorted((a, b) for a, b in d.items() if a not in ('word', 'after', 'expect'))))
        res.append((comb, upd))
    return res


def call(loc, sub, ret):
    loc = dict(loc)
    stack = loc.get('stk', ())
    loc['stk'] = stack + (ret,)
    return loc, sub


def ret(loc):
    loc = dict(loc)
    stk = loc['stk']
    loc['stk'] = stk[:-1]
    if not loc['stk']:
        del loc['stk']
    return loc, stk[-1]


def step(state, tid):
    sh, thr = state
    kind, pc, loc_t = thr[tid]
    loc = dict(loc_t)
    cx = Ctx(sh, thr, tid)
    S = list(sh)
    me = f'{kind}{tid}'

    # ---------- shared subroutines: ring_peek, pool_wake_one ----------
    if pc == 'peek1':        # ring_peek: pos = deq_pos (relaxed)
        loc['pp'] = sh[DEQ]
        cx.emit(f'{me} ring_peek: load deq_pos={sh[DEQ]}', S, 'peek2', loc)
    elif pc == 'peek2':      # ring_peek: slot->seq == 2 pos + 1 (acquire)
        loc['found'] = int(is_published(sh, loc.pop('pp')))
        loc, r = ret(loc)
        cx.emit(f'{me} ring_peek: seq load -> {bool(loc["found"])}', S, r, loc)
    elif pc == 'wk1':        # pool_wake_one: parked == 0 -> return
        if sh[PARKED] == 0 and 'wake_parked0' not in MUT:
            loc, r = ret(loc)
            cx.emit(f'{me} pool_wake_one: parked==0, no wake', S, r, loc)
        else:
            cx.emit(f'{me} pool_wake_one: parked={sh[PARKED]}', S, 'wk2', loc)
    elif pc == 'wk2':        # is_recent(spin_beat_ns)
        for ans, exp in recent_choices(sh, sh[BEAT]):
            S2 = list(S); S2[EXPIRED] = exp
            if ans:
                l2, r = ret(loc)
                cx.emit(f'{me} pool_wake_one: spin_beat recent (tok {sh[BEAT]}), no wake', S2, r, l2)
            else:
                cx.emit(f'{me} pool_wake_one: spin_beat not recent ({sh[BEAT]})', S2, 'wk3', loc)
    elif pc == 'wk3':        # sent = waking_ns; is_recent(sent)
        for ans, exp in recent_choices(sh, sh[WAKING]):
            S2 = list(S); S2[EXPIRED] = exp
            l2 = dict(loc); l2['sent'] = sh[WAKING]
            if ans:
                l2, r = ret(l2)
                l2.pop('sent', None)
                cx.emit(f'{me} pool_wake_one: waking_ns recent (tok {sh[WAKING]}), no wake', S2, r, l2)
            else:
                cx.emit(f'{me} pool_wake_one: waking_ns={sh[WAKING]} not recent', S2, 'wk4', l2)
    elif pc == 'wk4':        # CAS waking_ns sent -> now|1
        sent = loc.pop('sent')
        if sh[WAKING] == sent:
            S[WAKING] = fresh(sh, thr)
            cx.emit(f'{me} pool_wake_one: CAS waking_ns {sent}->new mark', S, 'wk5', loc)
        else:
            loc, r = ret(loc)
            cx.emit(f'{me} pool_wake_one: CAS waking_ns fails', S, r, loc)
    elif pc == 'wk5':        # nl__pool_futex_signal: epoch++
        S[EPOCH] += 1
        cx.emit(f'{me} futex_signal: epoch++ -> {S[EPOCH]}', S, 'wk6', loc)
    elif pc == 'wk6':        # FUTEX_WAKE 1
        l2, r = ret(loc)
        for comb, upd in futex_wake_choices(thr, 'epoch', 1):
            cx.emit(f'{me} futex_wake(epoch,1) wakes {list(comb)}', S, r, dict(l2), upd)

    # ---------- producer ----------
    elif kind == 'P':
        if pc == 'next':
            i = loc['i'] + 1
            if i == NT:
                cx.emit(f'{me} done', S, 'done', {})
            else:
                loc['i'] = i
                loc['tried'] = 0
                cx.emit(f'{me} nl_pool_submit task {tid * NT + i}', S, 'push1', loc)
        elif pc == 'push1':      # ring_push: pos = enq_pos (relaxed); closed?
            if sh[CLOSED]:
                cx.emit(f'{me} ring_push: closed -> ESHUTDOWN', S, 'pfin', loc)
            else:
                loc['pos'] = sh[ENQ]
                cx.emit(f'{me} ring_push: load enq_pos={sh[ENQ]}', S, 'push2', loc)
        elif pc == 'push2':      # seq = slot->seq
            pos = loc['pos']
            dif = sh[SEQ][pos % C] - 2 * pos
            if dif == 0:
                cx.emit(f'{me} ring_push: slot {pos % C} free for pos {pos}', S, 'push3', loc)
            elif dif < 0:
                loc.pop('pos')
                cx.emit(f'{me} ring_push: full -> EAGAIN', S, 'eagain', loc)
            else:
                cx.emit(f'{me} ring_push: slot moved on, reload', S, 'push1', loc)
        elif pc == 'push3':      # CAS enq_pos pos -> pos+1
            pos = loc['pos']
            if sh[ENQ] == pos and not sh[CLOSED]:
                S[ENQ] = pos + 1
                cx.emit(f'{me} ring_push: CAS enq_pos {pos}->{pos + 1}', S, 'push4', loc)
            else:
                if sh[CLOSED]:
                    loc.pop('pos')
                    cx.emit(f'{me} ring_push: CAS fails on POS_CLOSED -> ESHUTDOWN', S, 'pfin', loc)
                else:
                    loc['pos'] = sh[ENQ]
                    cx.emit(f'{me} ring_push: CAS fails, pos={sh[ENQ]}', S, 'push2', loc)
        elif pc == 'push4':      # slot->job = *job; exchange(seq, 2pos+1) seq_cst
            pos = loc.pop('pos')
            t = tid * NT + loc['i']
            jb = list(S[JOB]); jb[pos % C] = t; S[JOB] = tuple(jb)
            sq = list(S[SEQ]); sq[pos % C] = 2 * pos + 1; S[SEQ] = tuple(sq)
            acc = list(S[ACCEPTED]); acc[t] = 1; S[ACCEPTED] = tuple(acc)
            loc, sub = call(loc, 'wk1', 'grow1' if args.burst else 'pfin')
            cx.emit(f'{me} ring_push: publish task {t} at pos {pos} (xchg seq={2 * pos + 1})', S, sub, loc)
        elif pc == 'grow1':      # pool_maybe_grow: nthreads, idle (relaxed)
            if sh[NTHREADS] >= NW or sh[IDLE] > 0:
                cx.emit(f'{me} pool_maybe_grow: n={sh[NTHREADS]} idle={sh[IDLE]}, no spawn', S, 'pfin', loc)
            elif sh[LOCK] == -1:
                S[LOCK] = tid
                cx.emit(f'{me} pool_maybe_grow: lock', S, 'grow2', loc)
        elif pc == 'grow2':      # under lock: !is_shutting && nthreads < max -> spawn
            S[LOCK] = -1
            upd = None
            if not sh[SHUTTING] and sh[NTHREADS] < NW:
                slot = next(NP + w for w in range(NW) if thr[NP + w][1] in ('empty', 'exited'))
                S[NTHREADS] += 1
                upd = {slot: ('W', 'top', ())}
                cx.emit(f'{me} nl__pool_spawn_locked: start worker {slot}, nthreads={S[NTHREADS]}; unlock', S, 'pfin', loc, upd)
            else:
                cx.emit(f'{me} pool_maybe_grow: no room/shutting; unlock', S, 'pfin', loc)
        elif pc == 'eagain':
            if args.wait:
                if loc['tried']:   # pool_wait_enqueue: retry failed -> futex_wait(full_epoch, e)
                    cx.emit(f'{me} pool_wait_enqueue: EAGAIN again', S, 'fw4', loc)
                else:
                    loc['tried'] = 1
                    cx.emit(f'{me} pool_when_full: NL_POOL_WAIT', S, 'fw1', loc)
            else:
                cx.emit(f'{me} pool_when_full: rejected', S, 'pfin', loc)
        elif pc == 'fw1':        # full_waiters++
            S[FW] += 1
            cx.emit(f'{me} pool_wait_enqueue: full_waiters++ -> {S[FW]}', S, 'fw2', loc)
        elif pc == 'fw2':        # e = full_epoch; fence
            loc['fe'] = sh[FEPOCH]
            cx.emit(f'{me} pool_wait_enqueue: e=full_epoch={sh[FEPOCH]}', S, 'push1', loc)
        elif pc == 'fw4':        # futex_wait(full_epoch, e)
            if sh[FEPOCH] != loc['fe']:
                cx.emit(f'{me} futex_wait(full_epoch,{loc["fe"]}): changed, returns', S, 'fw5', loc)
            else:
                l2 = dict(loc); l2.update(word='fepoch', after='fw5', expect=loc['fe'])
                cx.emit(f'{me} futex_wait(full_epoch,{loc["fe"]}): sleeps', S, 'blocked', l2)
        elif pc == 'fw5':        # full_waiters--, loop
            S[FW] -= 1
            loc.pop('fe')
            cx.emit(f'{me} pool_wait_enqueue: full_waiters-- (retry)', S, 'fw1', loc)
        elif pc == 'pfin':       # end of one submit (pool_wait_enqueue: full_waiters--)
            if args.wait and loc.get('tried'):
                S[FW] -= 1
                loc.pop('fe', None)
                cx.emit(f'{me} pool_wait_enqueue: full_waiters-- (return)', S, 'next', loc)
            else:
                cx.emit(f'{me} submit returns', S, 'next', loc)

    # ---------- worker ----------
    elif kind == 'W':
        if pc == 'top':
            if SHUT == 'discard' and sh[DISC]:
                cx.emit(f'{me} worker_main: is_discarding -> exit', S, 'exited', {})
            else:
                cx.emit(f'{me} worker_main: ring_pop', S, 'pop1', loc)
        elif pc == 'pop1':
            loc['pos'] = sh[DEQ]
            cx.emit(f'{me} ring_pop: load deq_pos={sh[DEQ]}', S, 'pop2', loc)
        elif pc == 'pop2':
            pos = loc['pos']
            dif = sh[SEQ][pos % C] - (2 * pos + 1)
            if dif == 0:
                cx.emit(f'{me} ring_pop: pos {pos} published', S, 'pop3', loc)
            elif dif < 0:
                loc.pop('pos')
                if loc.get('cancel'):
                    cx.emit(f'{me} ring_pop: empty', S, loc.pop('cancel'), loc)
                else:
                    if args.burst:
                        S[IDLE] += 1
                    cx.emit(f'{me} ring_pop: empty -> (idle++) worker_spin', S, 'sp1', loc)
            else:
                cx.emit(f'{me} ring_pop: stale pos, reload', S, 'pop1', loc)
        elif pc == 'pop3':
            pos = loc['pos']
            if sh[DEQ] == pos:
                S[DEQ] = pos + 1
                cx.emit(f'{me} ring_pop: CAS deq_pos {pos}->{pos + 1}', S, 'pop4', loc)
            else:
                loc['pos'] = sh[DEQ]
                cx.emit(f'{me} ring_pop: CAS fails', S, 'pop2', loc)
        elif pc == 'pop4':       # *out = slot->job; exchange(seq, 2(pos+cap))
            pos = loc.pop('pos')
            t = sh[JOB][pos % C]
            pp = list(S[POPPED]); pp[t] += 1; S[POPPED] = tuple(pp)
            sq = list(S[SEQ]); sq[pos % C] = 2 * (pos + C); S[SEQ] = tuple(sq)
            cx.emit(f'{me} ring_pop: took task {t}, free slot (xchg)', S, 'pop5', loc)
        elif pc == 'pop5':       # full_waiters > 0 ?
            nxt = loc.pop('cancel_ok', None) or 'h1'
            if sh[FW] > 0:
                loc['then'] = nxt
                cx.emit(f'{me} ring_pop: full_waiters={sh[FW]} -> signal', S, 'pop6', loc)
            else:
                cx.emit(f'{me} ring_pop: full_waiters=0', S, nxt, loc)
        elif pc == 'pop6':
            S[FEPOCH] += 1
            cx.emit(f'{me} futex_signal: full_epoch++', S, 'pop7', loc)
        elif pc == 'pop7':
            nxt = loc.pop('then')
            for comb, upd in futex_wake_choices(thr, 'fepoch', 1):
                cx.emit(f'{me} futex_wake(full_epoch,1) wakes {list(comb)}', S, nxt, dict(loc), upd)
        elif pc == 'h1':         # hand-on: parked (relaxed) && ring_peek
            if 'no_handon' in MUT or sh[PARKED] == 0:
                cx.emit(f'{me} worker_main: parked=0, worker_run', S, 'run', loc)
            else:
                loc, sub = call(loc, 'peek1', 'h2')
                cx.emit(f'{me} worker_main: parked={sh[PARKED]}, peek for hand-on', S, sub, loc)
        elif pc == 'h2':
            if loc.pop('found'):
                loc, sub = call(loc, 'wk1', 'run')
                cx.emit(f'{me} worker_main: more work -> pool_wake_one (hand-on)', S, sub, loc)
            else:
                cx.emit(f'{me} worker_main: no more work, worker_run', S, 'run', loc)
        elif pc == 'run':
            cx.emit(f'{me} worker_run: task finished', S, 'top', loc)
        # worker_spin
        elif pc == 'sp1':        # beat_ns = spin_beat (relaxed); is_recent?
            if args.no_spin:
                cx.emit(f'{me} worker_spin: (spin disabled)', S, 'pk1', loc)
            else:
                for ans, exp in recent_choices(sh, sh[BEAT]):
                    S2 = list(S); S2[EXPIRED] = exp
                    if ans:
                        cx.emit(f'{me} worker_spin: beat {sh[BEAT]} recent -> park', S2, 'pk1', loc)
                    else:
                        l2 = dict(loc); l2['b'] = sh[BEAT]
                        cx.emit(f'{me} worker_spin: beat {sh[BEAT]} not recent', S2, 'sp2', l2)
        elif pc == 'sp2':        # CAS spin_beat b -> now|1
            b = loc.pop('b')
            if sh[BEAT] == b:
                S[BEAT] = fresh(sh, thr)
                loc, sub = call(loc, 'peek1', 'sp3')
                cx.emit(f'{me} worker_spin: CAS spin_beat -> new beat, spinning', S, sub, loc)
            else:
                cx.emit(f'{me} worker_spin: CAS spin_beat fails -> park', S, 'pk1', loc)
        elif pc == 'sp3':
            if loc['found']:
                cx.emit(f'{me} worker_spin: found', S, 'spend', loc)
            else:
                l2, sub = call(loc, 'peek1', 'sp3')
                cx.emit(f'{me} worker_spin: peek again', S, sub, l2)
                cx.emit(f'{me} worker_spin: heartbeat refresh', S, 'sprefresh', loc)
                cx.emit(f'{me} worker_spin: deadline', S, 'spend', loc)
        elif pc == 'sprefresh':
            S[BEAT] = fresh(sh, thr)
            loc, sub = call(loc, 'peek1', 'sp3')
            cx.emit(f'{me} worker_spin: store spin_beat=now (relaxed)', S, sub, loc)
        elif pc == 'spend':
            S[BEAT] = 0
            f = loc.pop('found')
            cx.emit(f'{me} worker_spin: store spin_beat=0, found={bool(f)}', S, ('unidle' if args.burst else 'top') if f else 'pk1', loc)
        # worker_park
        elif pc == 'unidle':
            S[IDLE] -= 1
            cx.emit(f'{me} worker_main: idle--', S, 'top', loc)
        elif pc == 'pk1':
            if sh[CLOSED]:
                loc['fin'] = sh[ENQ]
                cx.emit(f'{me} worker_park: enq_pos closed ({sh[ENQ]})', S, 'pk1b', loc)
            else:
                cx.emit(f'{me} worker_park: enq_pos open', S, 'pk2', loc)
        elif pc == 'pk1b':
            fin = loc.pop('fin')
            if sh[DEQ] >= fin:
                if args.burst:
                    S[IDLE] -= 1
                cx.emit(f'{me} worker_park: deq_pos >= final -> exit', S, 'exited', {})
            else:
                cx.emit(f'{me} worker_park: tasks left', S, 'pk2', loc)
        elif pc == 'pk2':
            loc['to'] = int(sh[NTHREADS] > CORE)   # timeout_ns = keepalive when n > core
            S[PARKED] += 1
            cx.emit(f'{me} worker_park: parked++ -> {S[PARKED]}', S, 'pk3', loc)
        elif pc == 'pk3':
            if 'clear_before_epoch' in MUT:   # the old order the file comment warns about
                S[WAKING] = 0
                cx.emit(f'{me} worker_park: waking_ns=0 (before epoch)', S, 'pk3x', loc)
            else:
                loc['e'] = sh[EPOCH]
                cx.emit(f'{me} worker_park: e=epoch={sh[EPOCH]}', S, 'pk4', loc)
        elif pc == 'pk3x':
            loc['e'] = sh[EPOCH]
            cx.emit(f'{me} worker_park: e=epoch={sh[EPOCH]}', S, 'pk5', loc)
        elif pc == 'pk4':
            if 'no_clear_after_epoch' not in MUT:
                S[WAKING] = 0
            cx.emit(f'{me} worker_park: waking_ns=0; fence', S, 'pk5', loc)
        elif pc == 'pk5':
            loc['cl'] = sh[CLOSED]
            loc, sub = call(loc, 'peek1', 'pk7')
            cx.emit(f'{me} worker_park: is_closed={bool(sh[CLOSED])}', S, sub, loc)
        elif pc == 'pk7':
            loc['hw'] = loc.pop('found')
            if 'no_recheck' in MUT:
                loc['hw'] = 0
            if loc['hw'] or loc['cl']:
                loc.pop('e')
                cx.emit(f'{me} worker_park: has_work/closed, no sleep', S, 'pk9', loc)
            elif sh[EPOCH] != loc['e']:
                cx.emit(f'{me} futex_wait(epoch,{loc["e"]}): changed, returns', S, 'pk9', loc)
            else:
                l2 = dict(loc); l2.update(word='epoch', after='pk9', expect=loc['e'])
                l2['rc'] = 0
                cx.emit(f'{me} futex_wait(epoch,{loc["e"]}): sleeps', S, 'blocked', l2)
        elif pc == 'pk9':
            loc.pop('e', None)
            S[PARKED] -= 1
            cx.emit(f'{me} worker_park: parked-- -> {S[PARKED]}', S, 'pk10', loc)
        elif pc == 'pk10':
            S[WAKING] = 0
            loc.pop('hw'); loc.pop('cl'); loc.pop('to', None)
            if loc.pop('rc', 0):
                cx.emit(f'{me} worker_park: waking_ns=0, ETIMEDOUT -> worker_try_retire', S, 'rt1', loc)
            else:
                cx.emit(f'{me} worker_park: waking_ns=0, return', S, 'unidle' if args.burst else 'top', loc)
        elif pc == 'rt1':        # lock
            if sh[LOCK] == -1:
                S[LOCK] = tid
                cx.emit(f'{me} worker_try_retire: lock; fence', S, 'rt2', loc)
        elif pc == 'rt2':        # !is_shutting && !ring_peek
            if sh[SHUTTING]:
                S[LOCK] = -1
                cx.emit(f'{me} worker_try_retire: shutting; unlock', S, 'unidle', loc)
            else:
                loc, sub = call(loc, 'peek1', 'rt3')
                cx.emit(f'{me} worker_try_retire: not shutting, peek', S, sub, loc)
        elif pc == 'rt3':
            f = loc.pop('found')
            S[LOCK] = -1
            if 'retire_no_peek' in MUT:
                f = 0
            if not f and sh[NTHREADS] > CORE:
                S[NTHREADS] -= 1
                S[IDLE] -= 1
                cx.emit(f'{me} worker_try_retire: retire (nthreads={S[NTHREADS]}); unlock; exit', S, 'exited', {})
            else:
                cx.emit(f'{me} worker_try_retire: stays (found={bool(f)} n={sh[NTHREADS]}); unlock', S, 'unidle', loc)

    # ---------- shutdown thread ----------
    elif kind == 'S':
        if pc == 'start':
            if sh[LOCK] != -1:
                return []
            S[SHUTTING] = 1
            if SHUT == 'discard':
                S[DISC] = 1
                cx.emit(f'{me} nl_pool_shutdown: is_discarding=1', S, 'sd1', loc)
            else:
                cx.emit(f'{me} nl_pool_shutdown(DRAIN)', S, 'sd1', loc)
        elif pc == 'sd1':
            S[CLOSED] = 1
            loc['final'] = sh[ENQ]
            cx.emit(f'{me} nl_pool_shutdown: fetch_or POS_CLOSED, final={sh[ENQ]}', S, 'sd2', loc)
        elif pc == 'sd2':
            S[EPOCH] += 1
            cx.emit(f'{me} futex_signal(epoch): epoch++', S, 'sd3', loc)
        elif pc == 'sd3':
            for comb, upd in futex_wake_choices(thr, 'epoch', 99):
                cx.emit(f'{me} futex_wake(epoch,ALL) wakes {list(comb)}', S, 'sd4', dict(loc), upd)
        elif pc == 'sd4':
            S[FEPOCH] += 1
            cx.emit(f'{me} futex_signal(full_epoch): ++', S, 'sd5', loc)
        elif pc == 'sd5':
            for comb, upd in futex_wake_choices(thr, 'fepoch', 99):
                cx.emit(f'{me} futex_wake(full_epoch,ALL) wakes {list(comb)}', S, 'cq' if SHUT == 'discard' else 'join', dict(loc), upd)
        elif pc == 'cq':         # pool_cancel_queued
            if sh[DEQ] < loc['final']:
                loc['cancel'] = 'cq'
                loc['cancel_ok'] = 'cq'
                cx.emit(f'{me} pool_cancel_queued: deq<final, pop', S, 'cqpop', loc)
            else:
                cx.emit(f'{me} pool_cancel_queued: done', S, 'join', loc)
        elif pc == 'join':
            if all(thr[NP + w][1] in ('exited', 'empty') for w in range(NW)):
                cx.emit(f'{me} pool_join_all: all joined', S, 'chk', loc)
        elif pc == 'chk':
            cx.emit(f'{me} nl_pool_shutdown returns', S, 'done', {'final': loc['final']})
    return cx.out


def step_cancel_pop(state, tid):
    """The shutdown thread's ring_pop reuses the worker's pop1..pop7 pcs."""
    sh, thr = state
    kind, pc, loc = thr[tid]
    fake = list(thr)
    fake[tid] = ('W', {'cqpop': 'pop1'}.get(pc, pc), loc)
    outs = step((sh, tuple(fake)), tid)
    res = []
    for label, (s2, t2) in outs:
        t2 = list(t2)
        k, p, l = t2[tid]
        t2[tid] = ('S', p, l)
        res.append((label.replace(f'W{tid}', f'S{tid}'), (s2, tuple(t2))))
    return res


def successors(state):
    sh, thr = state
    res = []
    for tid in range(NTHR):
        kind, pc, loc = thr[tid]
        if pc == 'blocked' and dict(loc).get('to'):
            d = dict(loc)
            after = d['after']
            d = {a: b for a, b in d.items() if a not in ('word', 'after', 'expect')}
            d['rc'] = 1
            t2 = list(thr); t2[tid] = (kind, after, tuple(sorted(d.items())))
            res.append((f'{kind}{tid} futex_wait: keepalive timeout -> ETIMEDOUT', canon(sh, tuple(t2))))
            continue
        if pc in ('done', 'exited', 'blocked', 'empty'):
            continue
        if kind == 'S' and (pc == 'cqpop' or pc.startswith('pop')):
            res.extend(step_cancel_pop(state, tid))
        else:
            res.extend(step(state, tid))
    return res


def ring_tasks(sh):
    return [p for p in range(sh[DEQ], sh[ENQ]) if is_published(sh, p)]


def check_state(state):
    sh, thr = state
    if any(c > 1 for c in sh[POPPED]):
        return 'a task was popped twice'
    for t in range(NTASKS):
        if sh[POPPED][t] and not sh[ACCEPTED][t]:
            return 'popped a task never published'
    if args.strict and all(thr[p][1] == 'done' for p in range(NP)) and ring_tasks(sh) and SHUT == 'none':
        ws = [thr[NP + w][1] for w in range(NW)]
        if 'blocked' in ws and all(x in ('blocked', 'run', 'exited', 'empty') for x in ws):
            return f'SLEEPER WHILE QUEUED: tasks at {ring_tasks(sh)}, workers {ws}'
    return None


def check_terminal(state):
    sh, thr = state
    prods_done = all(thr[p][1] == 'done' for p in range(NP))
    if not prods_done:
        return 'deadlock: a producer can never finish (blocked in futex_wait)'
    if SHUT == 'none':
        if sh[DEQ] != sh[ENQ]:
            return f'STRANDED: tasks at pos {ring_tasks(sh)} in the ring, every worker asleep'
        return None
    if thr[-1][1] != 'done':
        return 'shutdown never returns (a worker never exits)'
    if SHUT == 'drain' and any(sh[ACCEPTED][t] and not sh[POPPED][t] for t in range(NTASKS)):
        return 'drain left an accepted task unrun'
    if any(sh[ACCEPTED][t] and not sh[POPPED][t] for t in range(NTASKS)):
        return 'accepted task neither run nor cancelled'
    return None


def is_goal(state):
    sh, thr = state
    if SHUT == 'none':
        return all(thr[p][1] == 'done' for p in range(NP)) and sh[DEQ] == sh[ENQ]
    return all(k in ('done', 'exited') or pc in ('done', 'exited') for k, pc, _ in thr)


def main():
    s0 = initial()
    index = {s0: 0}
    states = [s0]
    parent = [(-1, None)]
    edges = [] if args.liveness else None
    q = deque([0])
    violations = []
    nterm = 0
    while q:
        i = q.popleft()
        st = states[i]
        bad = check_state(st)
        if bad:
            violations.append((bad, i)); break
        succ = successors(st)
        if not succ:
            nterm += 1
            bad = check_terminal(st)
            if bad:
                violations.append((bad, i)); break
        for label, s2 in succ:
            j = index.get(s2)
            if j is None:
                j = len(states)
                index[s2] = j
                states.append(s2)
                parent.append((i, label))
                q.append(j)
                if len(states) > args.max_states:
                    print('state limit hit'); sys.exit(2)
            if edges is not None:
                edges.append((i, j))
    print(f'config: workers={NW} producers={NP} tasks/producer={NT} cap={C} shutdown={SHUT} '
          f'wait={args.wait} mutant={sorted(MUT)}')
    print(f'states explored: {len(states)}  terminal states: {nterm}')
    if violations:
        bad, i = violations[0]
        print('VIOLATION:', bad)
        trace = []
        while i > 0:
            p, label = parent[i]
            trace.append(label)
            i = p
        for n, l in enumerate(reversed(trace), 1):
            print(f'  {n:3d}. {l}')
        sh, thr = states[violations[0][1]]
        print('final shared:', dict(zip(['enq', 'closed', 'deq', 'seq', 'job', 'parked', 'epoch',
                                          'waking', 'beat', 'fw', 'fepoch', 'disc', 'popped',
                                          'expired', 'accepted'], sh)))
        print('final threads:', thr)
        sys.exit(1)
    if edges is not None:
        rev = [[] for _ in states]
        for a, b in edges:
            rev[b].append(a)
        good = [False] * len(states)
        dq = deque(i for i, s in enumerate(states) if is_goal(s))
        for i in dq:
            good[i] = True
        while dq:
            b = dq.popleft()
            for a in rev[b]:
                if not good[a]:
                    good[a] = True
                    dq.append(a)
        nbad = good.count(False)
        print(f'liveness AG EF(goal): {"OK" if nbad == 0 else f"{nbad} states cannot reach goal"}')
        if nbad:
            i = good.index(False)
            trace = []
            while i > 0:
                p, label = parent[i]
                trace.append(label); i = p
            for n, l in enumerate(reversed(trace), 1):
                print(f'  {n:3d}. {l}')
            sys.exit(1)
    print('no violation')


main()
