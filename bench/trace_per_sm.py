#!/usr/bin/env python3
"""Per-SM view of a decode timeline dump (diagnostic build, see src/decode/trace.h).

    python3 bench/trace_per_sm.py raw.csv [row-substring]

raw.csv: WEFT_TRACE_DUMP of scripts/diag/decode-trace.sh (one line per CTA of a row's last traced
launch). For each row (one run after the L2 flush, prefix trace_): the distribution of the CTAs'
KV-loop end times (us from the first CTA entry), the SMs with one busy CTA against two, the
slowest CTAs with their SM and first-tile time, and the mean loop end by SM id // 12 (groups of
consecutive SM ids, which show the systematically faster and slower parts of the chip).
"""
import csv,sys,collections,statistics as st
ev=['record','indptr','page0','issued','item_ready','first_tile','loop_end','states','item_stored','merge_decided','exit']
rows=collections.defaultdict(list)
for r in csv.reader(open(sys.argv[1])):
    name,pre,cta,sm,items,merged,entry=r[:7]
    vals=list(map(float,r[7:]))
    rows[(name,pre)].append(dict(cta=int(cta),sm=int(sm),items=int(items),merged=int(merged),entry=float(entry),**dict(zip(ev,vals))))
want=sys.argv[2] if len(sys.argv)>2 else ''
for (name,pre),L in rows.items():
    if pre!='trace_' or want not in name: continue
    L=[x for x in L if x['items']>0]
    le=sorted(x['entry']+x['loop_end'] for x in L)
    n=len(le)
    q=lambda f: le[min(n-1,int(f*n))]
    print(name, 'n=%d loop_end abs: p0 %.1f p10 %.1f p50 %.1f p90 %.1f p99 %.1f max %.1f'%(n,le[0]/1e3,q(.1)/1e3,q(.5)/1e3,q(.9)/1e3,q(.99)/1e3,le[-1]/1e3))
    # per SM: count of ctas, mean loop end
    bysm=collections.defaultdict(list)
    for x in L: bysm[x['sm']].append(x)
    single=[x for s,v in bysm.items() if len(v)==1 for x in v]
    dbl=[x for s,v in bysm.items() if len(v)==2 for x in v]
    f=lambda v: st.mean(x['entry']+x['loop_end'] for x in v)/1e3 if v else 0
    print('   SMs with 1 busy CTA: %d (mean loop end %.1f); with 2: %d (mean %.1f)'%(len(single),f(single),len(dbl)//2,f(dbl)))
    # slowest 10 ctas: sm ids
    sl=sorted(L,key=lambda x:-(x['entry']+x['loop_end']))[:12]
    print('   slowest: '+' '.join('sm%d:%.1f(ft %.1f)'%(x['sm'],(x['entry']+x['loop_end'])/1e3,x['first_tile']/1e3) for x in sl))
    # by GPC-ish: group sm ids by sm//18? print mean loop end per sm bucket of 12
    b=collections.defaultdict(list)
    for x in L: b[x['sm']//12].append(x['entry']+x['loop_end'])
    print('   by sm//12: '+' '.join('%d:%.1f'%(k,st.mean(v)/1e3) for k,v in sorted(b.items())))
