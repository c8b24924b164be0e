# Compares an export's fields with haloscope's: bits equal? max |Δ|.
import sys, glob, os, numpy as np
a, b = sys.argv[1], sys.argv[2]
names = sorted(os.path.basename(f) for f in glob.glob(b + "/*.npy"))
same, worst = True, 0.0
for n in names:
    try:
        x, y = np.load(os.path.join(a, n)), np.load(os.path.join(b, n))
    except Exception as e:
        print("missing", n, e); sys.exit(0)
    if x.shape != y.shape:
        print("shape", n, x.shape, y.shape); sys.exit(0)
    same &= np.array_equal(x.view(np.uint32), y.view(np.uint32))
    with np.errstate(all="ignore"):
        d = np.abs(x.astype(np.float64) - y.astype(np.float64))
    d = np.where(np.isnan(d), np.inf, d)
    worst = max(worst, float(d.max()))
print("identical" if same else "differs", "%.3g" % worst)
