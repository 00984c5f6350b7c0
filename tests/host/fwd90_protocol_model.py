#!/usr/bin/env python3
"""fwd90_protocol_model.py: a model of fwd_sm90's barrier protocol between the producer and the
consumer warpgroups (templates/fwd_sm90.cuh), run under random interleavings, to check a change on
the CPU before a GPU hangs on it: no deadlock, no load into a stage or the Q buffer while a GEMM
may still read it, every consumer sees every key tile. It models the persistent loop's work
tiles (each with 0 or more live key tiles and some warpgroups idle past the sequence's end), the
K/V stages, the mbarriers (an arrive count and a phase; an extra arrive lands in the current
phase, as on the GPU), the turn ring (named barriers of two warpgroups' arrivals), the
asynchronous TMA loads and wgmma groups, and the variants that move the protocol:
  --ring-per-tile  the turn ring closed at each work tile's end (fwd90_ring_per_tile, the
               ring_closed variant): the last warpgroup opens it at each tile's start and skips
               its hand-over after the tile's last key tile. Without it, the ring of session 40:
               opened once before the first tile, a hand-over after every key tile, and
               warpgroup 0 takes the token left at the end after its last tile.
  --q-before-v   at a later work tile's start Q's load between the first key tile's K and V
               copies (fwd90_q_before_v), not after both
  --pv-wait-next the wait for a key tile's P V (and V's release) at the top of the next key
               tile, before its turn, and before the last tile's P V (fwd90_pv_wait_next)
  --q-early [N]  Q released after the tile's last S GEMM in work tiles of at most N key tiles
               (fwd90_q_early_tiles; no N: every tile), after its last P V in the others
  --skip-idle  idle warpgroups run the protocol only (fwd90_skip_idle)
Usage: python3 tests/host/fwd90_protocol_model.py [--ring-per-tile] [--q-before-v] [--pv-wait-next] [--q-early [N]] [--skip-idle]
       [--runs N] [--seed S]
The model is this file's reading of the template, not the template: keep the two in step."""
import argparse
import random
import sys


class Mbar:
    def __init__(self, name, count):
        self.name, self.count, self.pending, self.phase = name, count, count, 0

    def arrive(self):
        self.pending -= 1
        if self.pending == 0:
            self.phase += 1
            self.pending = self.count

    def done(self, parity_phase):  # has phase number parity_phase completed?
        return self.phase > parity_phase


class Named:  # bar.sync / bar.arrive over 2 warpgroups' worth of threads
    def __init__(self, name):
        self.name, self.arrived, self.gen = name, [], 0

    def arrive(self, who):
        # The GPU counts threads, not warpgroups: a second arrive of the same warpgroup before
        # the other's would complete the barrier without the other one, silently.
        if who in self.arrived:
            raise Violation(f"warpgroup {who} arrived twice on turn barrier {self.name}")
        self.arrived.append(who)
        if len(self.arrived) == 2:
            self.arrived = []
            self.gen += 1


class Violation(Exception):
    pass


def run(rng, wgs, stages, tiles, q_early, skip_idle, mutant=None, ring_per_tile=False,
        q_before_v=False, pv_wait_next=False):
    # tiles: list of (n_keys, n_live_wgs); q_early: the most key tiles a work tile may have for Q
    # to be released after its last S GEMM (0: never)
    q_full = Mbar("q_full", 1)
    q_empty = Mbar("q_empty", wgs)
    k_full = [Mbar(f"k_full{s}", 1) for s in range(stages)]
    v_full = [Mbar(f"v_full{s}", 1) for s in range(stages)]
    k_empty = [Mbar(f"k_empty{s}", wgs) for s in range(stages)]
    v_empty = [Mbar(f"v_empty{s}", wgs) for s in range(stages)]
    turn = [Named(i) for i in range(wgs + 1)]  # ids 1..wgs
    slot_tile = [None]  # the work tile the producer published with Q
    stage_slot = [None] * stages  # (global use, last flag) per stage
    readers = {"Q": set(), **{f"K{s}": set() for s in range(stages)}, **{f"V{s}": set() for s in range(stages)}}
    pending_loads = []  # (buffer name, barrier, action) landing later
    seen = [[] for _ in range(wgs)]

    def load(buf, bar, action=None):
        if readers[buf]:
            raise Violation(f"load into {buf} while {sorted(readers[buf])} may read it")
        pending_loads.append((buf, bar, action))

    def producer():
        # The template's order: on the first work tile Q at once, before any K/V; on later ones
        # the tile's first K/V copy (it needs only a free stage), then Q once the consumers
        # released the previous one, then the rest (q_before_v: Q between that first K and V).
        use = 0
        for t, (n, _) in enumerate(tiles + [(0, 0)]):
            end = t == len(tiles)

            def q_load(t=t, end=end):
                if t > 0:
                    while not q_empty.done(t - 1):
                        yield
                if end:
                    slot_tile[0] = "end"
                    q_full.arrive()
                else:
                    load("Q", q_full, lambda: slot_tile.__setitem__(0, t))

            if end or t == 0 or n == 0:
                yield from q_load()
                if end:
                    return
            for x in range(n):
                st, u = use % stages, use
                if u >= stages:
                    while not k_empty[st].done(u // stages - 1):
                        yield
                load(f"K{st}", k_full[st],
                     lambda st=st, u=u, last=(x == n - 1): stage_slot.__setitem__(st, (u, last)))
                if q_before_v and x == 0 and t > 0:
                    yield from q_load()
                if u >= stages:
                    while not v_empty[st].done(u // stages - 1):
                        yield
                load(f"V{st}", v_full[st])
                use += 1
                if not q_before_v and x == 0 and t > 0:
                    yield from q_load()
                yield

    def consumer(w):
        my, nxt = 1 + w, 1 + (w + 1) % wgs
        last_wg = w == wgs - 1
        use = 0
        tq = 0

        def sync(i):  # bar.sync: arrive, then wait for this generation to complete
            g = turn[i].gen
            turn[i].arrive(w)
            while turn[i].gen == g:
                yield

        def hand_over(last):  # after this warpgroup's GEMMs of a key tile (last: the tile's last)
            if ring_per_tile and last_wg and last:
                return  # the old ring: closed at the tile's end
            if mutant == "no_handover" or (mutant == "closed_once" and last_wg and last):
                return
            turn[nxt].arrive(w)

        if not ring_per_tile and last_wg:
            turn[1].arrive(w)  # the ring opens once: warpgroup 0 goes first
        while True:
            while not q_full.done(tq):
                yield
            t = slot_tile[0]
            if t == "end":
                if not ring_per_tile and w == 0 and mutant != "no_final_take":
                    yield from sync(1)  # the token the last hand-over (or the opening) left
                return
            n, live = tiles[t]
            tq += 1
            idle = w >= live

            def take(u, t=t):
                """Key tile u: wait for its K, read its slot, then this warpgroup's turn (the
                full and the idle path alike); its stage and whether it is the tile's last."""
                st = u % stages
                while not k_full[st].done(u // stages):
                    yield
                su, last = stage_slot[st]
                if su != u:
                    raise Violation(f"wg {w} read slot {su} for use {u}")
                seen[w].append((t, u))
                yield from sync(my)
                return st, last

            if idle and skip_idle:
                if ring_per_tile and last_wg and n > 0:
                    turn[1].arrive(w)
                vst = None
                for x in range(n):
                    st, last = yield from take(use)
                    hand_over(last)
                    k_empty[st].arrive()
                    if mutant == "skip_v":  # (wrong: V never released by an idle warpgroup)
                        use += 1
                        yield
                        continue
                    if vst is not None:
                        v_empty[vst].arrive()
                    vst = st
                    use += 1
                    yield
                if vst is not None:
                    v_empty[vst].arrive()
                q_empty.arrive()
                continue
            if (ring_per_tile or mutant == "open_each_tile") and last_wg and n > 0:
                turn[1].arrive(w)
            early = 0 < n <= q_early  # this work tile releases Q after its last S GEMM
            pv = None  # (stage, tag) of the P V in flight
            pst = None

            def settle():  # wait<0>: the P V in flight is done, its V released
                nonlocal pv
                if pv is not None:
                    readers[f"V{pv[0]}"].discard(pv[1])
                    v_empty[pv[0]].arrive()
                    pv = None

            for x in range(n):
                u = use
                if pv_wait_next:
                    settle()
                st, last = yield from take(u)
                # S = Q K^T issued; P V of the previous tile issued (after V landed)
                tag = (w, t, u)
                readers["Q"].add(tag)
                readers[f"K{st}"].add(tag)
                if pst is not None:
                    while not v_full[pst].done((u - 1) // stages):
                        yield
                    readers[f"V{pst}"].add(("pv",) + tag)
                    pv = (pst, ("pv",) + tag)
                hand_over(last)
                if early and last and mutant == "q_before_s":  # (wrong: Q still read)
                    q_empty.arrive()
                for _ in range(rng.randint(0, 3)):  # S in flight
                    yield
                readers["Q"].discard(tag)
                readers[f"K{st}"].discard(tag)
                k_empty[st].arrive()
                if early and last and mutant != "q_before_s":
                    q_empty.arrive()
                for _ in range(rng.randint(0, 3)):  # softmax
                    yield
                if pv is not None and mutant == "v_before_pv":  # (wrong: P V still reads V)
                    v_empty[pv[0]].arrive()
                    for _ in range(rng.randint(0, 3)):
                        yield
                    readers[f"V{pv[0]}"].discard(pv[1])
                    pv = None
                if not pv_wait_next:
                    settle()
                pst = st
                use += 1
            if pst is not None:  # the last tile's P V
                if pv_wait_next:
                    settle()
                while not v_full[pst].done((use - 1) // stages):
                    yield
                readers[f"V{pst}"].add(("pvlast", w, t))
                for _ in range(rng.randint(0, 3)):
                    yield
                readers[f"V{pst}"].discard(("pvlast", w, t))
                v_empty[pst].arrive()
            if not early:
                q_empty.arrive()
            for _ in range(rng.randint(0, 2)):  # O's store
                yield

    procs = [producer()] + [consumer(w) for w in range(wgs)]
    alive = list(range(len(procs)))
    steps = 0
    while alive:
        steps += 1
        if steps > 200000:
            raise Violation("no progress (deadlock)")
        # land some loads
        rng.shuffle(pending_loads)
        keep = []
        for buf, bar, action in pending_loads:
            if rng.random() < 0.5:
                if action:
                    action()
                bar.arrive()
            else:
                keep.append((buf, bar, action))
        pending_loads[:] = keep
        i = rng.choice(alive)
        try:
            next(procs[i])
        except StopIteration:
            alive.remove(i)
    while pending_loads:  # (the end marker and loads nobody waits for)
        buf, bar, action = pending_loads.pop()
    for b in turn[1:]:
        if b.arrived:  # a token nobody took: the next launch's bar.sync would see it
            raise Violation(f"turn barrier {b.name} left with arrivals of {b.arrived}")
    for w in range(wgs):
        uses = [u for _, u in seen[w]]
        if uses != list(range(sum(n for n, _ in tiles))):
            raise Violation(f"wg {w} saw key tiles {uses[:8]}...")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--q-early", type=int, nargs="?", const=1 << 20, default=0,
                    help="Q released early in work tiles of at most N key tiles (no N: all)")
    ap.add_argument("--skip-idle", action="store_true")
    ap.add_argument("--q-before-v", action="store_true",
                    help="a later work tile's Q load before its first V copy (the q_before_v variant)")
    ap.add_argument("--pv-wait-next", action="store_true",
                    help="P V's wait at the next key tile's top (the pv_wait_next variant)")
    ap.add_argument("--ring-per-tile", action="store_true",
                    help="the ring closed at each work tile's end (the ring_closed variant)")
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--self-test", action="store_true",
                    help="run the wrong protocols too (mutants), each of which must fail")
    args = ap.parse_args()
    if args.self_test:
        mutants = [("skip_v", 0, True), ("no_handover", 0, True), ("q_before_s", 1 << 20, False),
                   ("v_before_pv", 0, False)]
        if not args.ring_per_tile:  # the ring across tiles' own ways to go wrong
            mutants += [("closed_once", 0, False), ("no_final_take", 0, True),
                        ("open_each_tile", 0, False)]
        for mutant, qe, si in mutants:
            rng = random.Random(args.seed)
            caught = None
            for r in range(args.runs):
                wgs = rng.choice([2, 3])
                stages = rng.choice([2, 3, 4])
                tiles = [(rng.choice([0, 1, 2, 3, 5, 8]), rng.randint(1, wgs))
                         for _ in range(rng.randint(1, 5))]
                try:
                    run(rng, wgs, stages, tiles, qe, si, mutant, args.ring_per_tile,
                        args.q_before_v, args.pv_wait_next)
                except Violation as e:
                    caught = e
                    break
            if caught is None:
                print(f"FAIL: the mutant {mutant} passed {args.runs} runs: the model cannot see it")
                return 1
            print(f"mutant {mutant} caught: {caught}")
    rng = random.Random(args.seed)
    for r in range(args.runs):
        wgs = rng.choice([2, 3])
        stages = rng.choice([2, 3, 4])
        tiles = [(rng.choice([0, 1, 2, 3, 5, 8]), rng.randint(1, wgs)) for _ in range(rng.randint(1, 5))]
        try:
            run(rng, wgs, stages, tiles, args.q_early, args.skip_idle, None, args.ring_per_tile,
                args.q_before_v, args.pv_wait_next)
        except Violation as e:
            print(f"FAIL run {r}: wgs {wgs} stages {stages} tiles {tiles}: {e}")
            return 1
    print(f"PASS: {args.runs} runs (q_early {args.q_early}, skip_idle {args.skip_idle}, "
          f"ring {'per tile' if args.ring_per_tile else 'across tiles'}"
          f"{', Q before V' if args.q_before_v else ''}"
          f"{', P V waited next' if args.pv_wait_next else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
