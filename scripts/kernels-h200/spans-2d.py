"""The GPU's span of each traced piece of a run (trace-2d.sh), µs a step, and what
fused-overlap hides of the exchange by them: (fused - overlap) / (fused - no exchange).
A piece is 320 steps (the headless run's chunk at 6400 steps); the span runs from the
first timed kernel or copy's start to the last one's end, so the host's time between
pieces (writing the records) is left out."""
import json,statistics as st,sys
res={}
for n,ch in ((4096,320),(16384,320)):
  for p in ('fused-overlap','fused','noexchange'):
    ev=json.load(open(f't-{n}-{p}.json'))
    x=[e for e in ev if e.get('ph')=='X' and e['cat'] in ('kernel','copy')]
    chunks={}
    for e in x:
        c=e['args']['step']//ch
        a,b=chunks.get(c,(1e18,0)); chunks[c]=(min(a,e['ts']),max(b,e['ts']+e['dur']))
    spans=[(b-a)/ch for a,b in sorted(chunks.values())]
    res[(n,p)]=st.median(spans)
    # per-device interior+boundary durations
    ks={}
    for e in x:
        if e['cat']=='kernel': ks.setdefault(e['name'].split()[0],[]).append(e['dur'])
    print(f"{n:>6} {p:<14} chunk span/step {' '.join(f'{v:.2f}' for v in spans)}  " + ' '.join(f"{k} {st.median(v):.1f}" for k,v in ks.items()))
  f,o,z=res[(n,'fused')],res[(n,'fused-overlap')],res[(n,'noexchange')]
  print(f"   hidden (GPU spans) {(f-o)/(f-z)*100:.0f} %")
