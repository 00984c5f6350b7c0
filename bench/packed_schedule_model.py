"""packed_schedule_model.py: a model (not a measurement) of fwd_sm90's persistent tile queue for
dense and packed causal batches of equal lengths (bench/NOTES-sm90.md, "Session 15").

132 CTAs take work items greedily in the kernel's order; an item costs its key tiles plus 0.3 of
a tile of fixed overhead (a packed tile no sequence owns: 0.05). Prints each order's makespan
over the ideal (total work / 132) and the packed/dense speed ratio the order alone would give.
Run: python3 bench/packed_schedule_model.py
"""
import heapq
def simulate(order, ctas=132):
    # greedy: each CTA takes the next item when free; work = key tiles (causal) + 1 fixed cost
    heap=[(0.0,c) for c in range(ctas)]; heapq.heapify(heap)
    end=0
    for w in order:
        t,c=heapq.heappop(heap); t+=w; end=max(end,t); heapq.heappush(heap,(t,c))
    return end
def case(S, D, B, H, BM=128, BN=128, causal=True):
    T=S//BM
    work=lambda m: (m*BM+BM)//BN + 0.3 if causal else S//BN + 0.3  # key tiles + per-tile overhead
    # dense: fwd90_tile_of sections: heads per section = 16MB / (S*(2D)*2)
    hb=H*B; heads=max(1,min(hb,(16<<20)//(S*(D+D)*2)))
    dense=[]
    for sec in range((hb+heads-1)//heads):
        in_sec=min(heads,hb-sec*heads)
        for w in range(in_sec*T):
            m=T-1-w//in_sec; dense.append(work(m))
    # packed: n_mb = T*B + B per head (x tiles), hb = H; heads per section from Skv=Tk=S*B
    nmb=T*B+B; heads_p=max(1,min(H,(16<<20)//(S*B*(D+D)*2)))
    packed=[]
    for sec in range((H+heads_p-1)//heads_p):
        in_sec=min(heads_p,H-sec*heads_p)
        for w in range(in_sec*nmb):
            x=nmb-1-w//in_sec
            # x -> (b, m): base_b = b*T + b  (start_b/BM = b*T)
            b=x//(T+1); m=x-b*(T+1)
            packed.append(work(m) if m<T else 0.05)
    total=sum(dense)
    return simulate(dense)/ (total/132), simulate(packed)/(total/132)
for S,D in ((1024,64),(1024,128),(4096,64),(4096,128)):
    B=16384//S; H=2048//D
    d,p=case(S,D,B,H)
    print(S,D,"dense makespan/ideal %.3f packed %.3f -> packed/dense speed %.3f"%(d,p,d/p))
