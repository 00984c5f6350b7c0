"""merge_partials: attention over disjoint key sets, merged (context parallelism's and split-KV's
arithmetic, in PyTorch).

Each part is what an attnc graph returns for its keys: O normalized within the part and the
rows' lse (`output lse = logsumexp(s)`; -inf for a row none of the part's keys reach). Shards of
a longer sequence see their global positions through scalar offsets in the mask
(docs/language.md "Positions"). The merge is the CPU reference's (reference/merge.c):

    lse = log(sum_s exp(lse_s)),  O = sum_s exp(lse_s - lse) O_s

in float32 (float64 for float64 parts), with a row no part reaches giving O = 0 and lse = -inf; it is differentiable (plain
PyTorch operations), so a sharded forward trains through autograd, and its gradient at a row
without keys is 0, not NaN.
"""
import torch


def merge_partials(outs, lses):
    """Merge partial attention results over disjoint key sets.

    outs: a sequence of tensors [..., S, D] (any float dtype, the same shape);
    lses: a sequence of tensors [..., S] (their rows' logsumexp, -inf where a part has no key).
    Returns (o, lse): o [..., S, D] in outs[0]'s dtype, lse [..., S] in float32 (float64 for
    float64 parts), the precision the merge runs in.
    """
    outs, lses = list(outs), list(lses)
    if not outs or len(outs) != len(lses):
        raise ValueError(f"merge_partials: {len(outs)} outputs and {len(lses)} lse tensors "
                         "(want the same number, at least one)")
    for o, l in zip(outs, lses):
        if o.shape != outs[0].shape or l.shape != o.shape[:-1]:
            raise ValueError(f"merge_partials: an output {tuple(o.shape)} with an lse "
                             f"{tuple(l.shape)} (want every output {tuple(outs[0].shape)} and "
                             "its lse the same without the last dimension)")
    ct = torch.promote_types(outs[0].dtype, torch.float32)
    l = torch.stack([x.to(ct) for x in lses])           # [n, ..., S]
    m = l.amax(0)                                       # the largest part's lse per row
    reached = m > float("-inf")
    m0 = torch.where(reached, m, torch.zeros_like(m))   # finite everywhere: no -inf - -inf
    w = torch.exp(l - m0)                               # 0 for a part without keys
    total = torch.where(reached, w.sum(0), torch.ones_like(m))
    lse = torch.where(reached, m0 + torch.log(total), m)
    wn = w / total                                      # 0 across a row no part reaches
    o = sum(wn[k].unsqueeze(-1) * outs[k].to(ct) for k in range(len(outs)))
    return o.to(outs[0].dtype), lse
