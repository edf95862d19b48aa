"""Hot-expert replication for expert parallelism, after DeepSeek's EPLB (plait.torch.moe).

A gate routes tokens to *logical* experts. The ranks hold *slots*, `slots_per_rank` each.
A placement says which logical expert each slot holds. The hottest experts hold several
slots; their replicas take turns on the expert's tokens, and their gradients are summed
among them so that they stay identical.

    placement = ExpertPlacement(num_logical=16, ranks=4, slots_per_rank=6)
    balancer = ExpertBalancer(placement, experts, optimizer, every=10)   # experts: this rank's
    ...                                                                   # slots (ModuleList)
    phys = placement.route(topk_logical, rank)    # slots to dispatch to (Dispatcher over all
    balancer.record(topk_logical)                 # ranks * slots_per_rank "experts")
    loss.backward(); balancer.reduce_replica_grads(); optimizer.step()
    balancer.step()              # every `every` steps: re-plan and move experts if it helps

Every rank computes the plan the same way from the same numbers (the load summed over all
ranks and over the last `every` steps), so no plan travels. Moving an expert sends its
weights and its optimizer state, rank to rank, over the group (batch_isend_irecv).
"""
import torch
import torch.distributed as dist

__all__ = ["ExpertBalancer", "ExpertPlacement", "plan"]


def plan(loads, ranks, slots_per_rank):
    """EPLB's two steps on `loads` (one number per logical expert). It returns, for each of
    the ranks * slots_per_rank slots, the logical expert that slot holds.

    1. Replicate: every expert gets one slot. Each extra slot goes to the expert whose load per
       replica is the highest.
    2. Pack: the replicas are taken heaviest first. Each goes to the rank with the least load
       among the ranks with a free slot, preferring a rank that has no replica of that expert
       yet. Ties go to the lower rank number, so every rank computes the same placement."""
    loads = [float(v) for v in loads]
    num = len(loads)
    slots = ranks * slots_per_rank
    if slots < num:
        raise ValueError(f"{slots} slots cannot hold {num} experts")
    replicas = [1] * num
    for _ in range(slots - num):
        e = max(range(num), key=lambda i: (loads[i] / replicas[i], -i))
        replicas[e] += 1
    pieces = sorted(((loads[e] / replicas[e], e) for e in range(num) for _ in range(replicas[e])),
                    key=lambda p: (-p[0], p[1]))
    rank_load = [0.0] * ranks
    holds = [[] for _ in range(ranks)]
    for load, e in pieces:
        free = [r for r in range(ranks) if len(holds[r]) < slots_per_rank]
        fresh = [r for r in free if e not in holds[r]] or free
        r = min(fresh, key=lambda r: (rank_load[r], r))
        holds[r].append(e)
        rank_load[r] += load
    return [e for r in range(ranks) for e in sorted(holds[r])]


class ExpertPlacement:
    """Which logical expert each slot holds (`slots[s]`; rank r holds slots
    [r*slots_per_rank, (r+1)*slots_per_rank)). Starts with expert e in slot e, and the spare
    slots filled round robin (expert s % num_logical)."""

    def __init__(self, num_logical, ranks, slots_per_rank, slots=None):
        self.num_logical, self.ranks, self.slots_per_rank = num_logical, ranks, slots_per_rank
        self.num_slots = ranks * slots_per_rank
        if self.num_slots < num_logical:
            raise ValueError(f"{self.num_slots} slots cannot hold {num_logical} experts")
        self.slots = list(slots) if slots is not None else [s % num_logical for s in range(self.num_slots)]
        self._tables()

    def _tables(self):
        reps = [[] for _ in range(self.num_logical)]
        for s, e in enumerate(self.slots):
            reps[e].append(s)
        if any(not r for r in reps):
            raise ValueError("a placement must hold every expert")
        self.replicas = reps
        width = max(len(r) for r in reps)
        # [num_logical, width]: the replicas of each expert, repeated to the width.
        self._table = torch.tensor([[r[i % len(r)] for i in range(width)] for r in reps], dtype=torch.long)
        self._count = torch.tensor([len(r) for r in reps], dtype=torch.long)

    def local_experts(self, rank):
        """The logical experts of this rank's slots, in slot order."""
        return self.slots[rank * self.slots_per_rank:(rank + 1) * self.slots_per_rank]

    def route(self, topk_logical, rank):
        """Slots for each token's experts (-1 stays -1). The replicas of an expert take its
        tokens in turn: this rank's k-th token for expert e goes to replica (k + rank) mod m,
        so every replica gets the same share from every rank, and no replica is the least
        loaded by more than one token."""
        flat = topk_logical.reshape(-1)
        valid = flat >= 0
        e = torch.where(valid, flat, 0)
        # k: how many earlier (token, expert) pairs of this rank chose the same expert.
        onehot = torch.nn.functional.one_hot(e, self.num_logical) * valid[:, None]
        k = (onehot.cumsum(0) - onehot).gather(1, e[:, None]).squeeze(1)
        which = (k + rank) % self._count[e]
        phys = self._table[e, which]
        return torch.where(valid, phys, -1).reshape(topk_logical.shape)

    def max_over_mean(self, loads):
        """The busiest rank's load over the mean, under this placement (loads per logical
        expert, shared evenly among its replicas)."""
        per_rank = [0.0] * self.ranks
        for s, e in enumerate(self.slots):
            per_rank[s // self.slots_per_rank] += float(loads[e]) / len(self.replicas[e])
        mean = sum(per_rank) / self.ranks
        return max(per_rank) / mean if mean > 0 else 1.0


class ExpertBalancer:
    """Measures each logical expert's load, and every `every` steps re-plans the placement and
    moves the experts whose slots change.

    `experts` is this rank's slots: a ModuleList of slots_per_rank experts, all of one
    architecture. `optimizer` holds their parameters; their state moves with them.
    `every` = 0 never re-plans: the balancer then only reduces replicas' gradients. A new plan
    is taken when it lowers the busiest rank's load over the mean by `min_gain` (a fraction)."""

    def __init__(self, placement, experts, optimizer=None, every=0, group=None, min_gain=0.05):
        self.placement, self.experts, self.optimizer = placement, experts, optimizer
        self.min_gain = min_gain
        self.every, self.group = every, group
        self.rank = dist.get_rank(group)
        self.loads = torch.zeros(placement.num_logical, dtype=torch.float64)
        self.steps = 0
        self.moves = 0          # experts moved so far (counted once, on the receiving rank)
        self.history = []       # (step, max/mean before, max/mean after) for each re-plan

    def record(self, topk_logical):
        """Counts this rank's (token, expert) pairs per logical expert."""
        flat = topk_logical.reshape(-1)
        self.loads += torch.bincount(flat[flat >= 0], minlength=self.placement.num_logical).double()

    def reduce_replica_grads(self):
        """Sums the gradients of every replicated expert over its replicas, before the
        optimizer step. The replicas on one rank are summed there. Then each holder sends
        its sum to the expert's lowest holding rank, which adds them up and sends the total
        back. Only the holders take part, over point-to-point calls on the group."""
        p = self.placement
        local = p.local_experts(self.rank)
        params = [list(m.parameters()) for m in self.experts]
        numel = sum(q.numel() for q in params[0])
        mine = {}  # expert -> this rank's sum over its replicas
        for slot, e in enumerate(local):
            if len(p.replicas[e]) > 1:
                g = self._flat_grads(params[slot], numel)
                mine[e] = mine[e] + g if e in mine else g
        ops, gathered = [], {}
        for e in sorted(mine):
            holders = sorted({s // p.slots_per_rank for s in p.replicas[e]})
            if len(holders) == 1:
                continue
            lead = holders[0]
            if self.rank == lead:
                gathered[e] = [torch.empty(numel) for _ in holders[1:]]
                ops += [dist.P2POp(dist.irecv, buf, self._global(h), self.group)
                        for buf, h in zip(gathered[e], holders[1:])]
            else:
                ops.append(dist.P2POp(dist.isend, mine[e], self._global(lead), self.group))
        self._run(ops)
        ops = []
        for e in sorted(mine):
            holders = sorted({s // p.slots_per_rank for s in p.replicas[e]})
            if len(holders) == 1:
                continue
            if self.rank == holders[0]:
                for buf in gathered[e]:
                    mine[e] += buf
                ops += [dist.P2POp(dist.isend, mine[e], self._global(h), self.group) for h in holders[1:]]
            else:
                ops.append(dist.P2POp(dist.irecv, mine[e], self._global(holders[0]), self.group))
        self._run(ops)
        for slot, e in enumerate(local):
            if e not in mine:
                continue
            offset = 0
            for q in params[slot]:
                g = mine[e][offset:offset + q.numel()].view_as(q)
                if q.grad is None:
                    q.grad = g.clone()
                else:
                    q.grad.copy_(g)
                offset += q.numel()

    @staticmethod
    def _run(ops):
        if ops:
            for w in dist.batch_isend_irecv(ops):
                w.wait()

    @staticmethod
    def _flat_grads(params, numel):
        return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params]) \
            if params else torch.zeros(numel)

    def step(self):
        """After the optimizer step: counts it, and every `every` steps re-plans from the
        load of those steps (all ranks' together) and moves experts. Returns True when it moved."""
        self.steps += 1
        if not self.every or self.steps % self.every:
            return False
        loads = self.loads.clone()
        dist.all_reduce(loads, group=self.group)
        self.loads.zero_()
        p = self.placement
        new = plan(loads.tolist(), p.ranks, p.slots_per_rank)
        before = p.max_over_mean(loads)
        candidate = ExpertPlacement(p.num_logical, p.ranks, p.slots_per_rank, new)
        after = candidate.max_over_mean(loads)
        self.history.append((self.steps, before, after))
        # A new plan moves experts: take it only when it balances clearly better (EPLB's plans
        # shuffle slots between near-equal loads from one window to the next).
        if after > before * (1 - self.min_gain) or new == p.slots:
            return False
        self._move(p, candidate)
        self.placement = candidate
        return True

    # --- moving experts -------------------------------------------------------------------

    def _pack(self, slot):
        """A slot's weights, then its optimizer state (exp_avg, exp_avg_sq per parameter and
        the step), as one float32 vector."""
        parts, has_state = [], 0.0
        for prm in self.experts[slot].parameters():
            parts.append(prm.detach().reshape(-1).float())
        for prm in self.experts[slot].parameters():
            st = self.optimizer.state.get(prm, {}) if self.optimizer else {}
            has_state = 1.0 if st else has_state
            for key in ("exp_avg", "exp_avg_sq"):
                parts.append(st[key].reshape(-1).float() if key in st else torch.zeros(prm.numel()))
        step = 0.0
        for prm in self.experts[slot].parameters():
            st = self.optimizer.state.get(prm, {}) if self.optimizer else {}
            if "step" in st:
                step = float(st["step"])
        return torch.cat(parts + [torch.tensor([has_state, step])])

    def _unpack(self, slot, flat):
        params = list(self.experts[slot].parameters())
        offset = 0
        with torch.no_grad():
            for prm in params:
                prm.copy_(flat[offset:offset + prm.numel()].view_as(prm))
                offset += prm.numel()
        has_state, step = float(flat[-2]), float(flat[-1])
        for prm in params:
            avg = flat[offset:offset + prm.numel()].view_as(prm).clone()
            sq = flat[offset + prm.numel():offset + 2 * prm.numel()].view_as(prm).clone()
            offset += 2 * prm.numel()
            if self.optimizer is None:
                continue
            if has_state:
                self.optimizer.state[prm] = {"step": torch.tensor(step), "exp_avg": avg, "exp_avg_sq": sq}
            else:
                self.optimizer.state.pop(prm, None)

    def _move(self, old, new):
        """Every slot whose expert changes gets it from this rank's own old slots when it had
        one, else from the lowest rank that held it."""
        me, per = self.rank, old.slots_per_rank
        snapshot = {}  # this rank's old slots, before any is overwritten
        for slot, e in enumerate(old.local_experts(me)):
            snapshot.setdefault(e, self._pack(slot))
        ops, incoming = [], []
        for s, e in enumerate(new.slots):
            dst = s // per
            if old.slots[s] == e:
                continue
            holders = sorted({h // per for h in old.replicas[e]})
            if dst in holders:
                if dst == me:
                    incoming.append((s % per, snapshot[e]))
                continue
            src = holders[0]
            if src == me:
                ops.append(dist.P2POp(dist.isend, snapshot[e], self._global(dst), self.group))
            elif dst == me:
                buf = torch.empty_like(next(iter(snapshot.values())))
                ops.append(dist.P2POp(dist.irecv, buf, self._global(src), self.group))
                incoming.append((s % per, buf))
                self.moves += 1
        self._run(ops)
        for slot, flat in incoming:
            self._unpack(slot, flat)

    def _global(self, rank):
        return dist.get_global_rank(self.group, rank) if self.group is not None else rank
