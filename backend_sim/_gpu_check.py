import sys
import time

import numpy as np

sys.path.insert(0, "/tmp/pp")
sys.path.insert(0, ".")
import ptxforge  # noqa: E402
from ptxforge.driver import BuiltModule  # noqa: E402
from ptxforge.ir.expr import IRError, Var  # noqa: E402
from ptxforge.ir.stmt import Buffer, Seq, Store  # noqa: E402

import tests.test_sim as T  # noqa: E402
from tests.random_schedules import WORKLOADS, random_schedule  # noqa: E402

dev = ptxforge.cuda()
per = int(sys.argv[1]) if len(sys.argv) > 1 else 30
t0 = time.time()


def on_gpu(module, arrays):
    f = BuiltModule(module, "cuda")
    d = [ptxforge.nd.array(a, dev) for a in arrays]
    f(*d)
    return [x.numpy() for x in d]


# hand-built: mixed expressions per lane
n = 64
F, I = Buffer("F", "float32", (n,)), Buffer("I", "int32", (n,))
v = Var("v")
ints, floats = T._mixed_expressions(v, F, I)
OI = Buffer("OI", "int32", (len(ints) * n,))
OF = Buffer("OF", "float32", (len(floats) * n,))
body = Seq([Store(OI, [v + j * n], e) for j, e in enumerate(ints)]
           + [Store(OF, [v + j * n], e) for j, e in enumerate(floats)])
k = T.kernel("lanes", [F, I, OI, OF], T.thread(v, n, "threadIdx.x", body), block=(n, 1, 1))
m = T.single_kernel_module(k)
fi = (np.linspace(-3, 3, n) + 0.01).astype(np.float32)
ii = ((np.arange(n) * 7919) % 2001 - 1000).astype(np.int32)
arrs = [fi, ii, np.zeros(OI.size, np.int32), np.zeros(OF.size, np.float32)]
sim_out = [a.copy() for a in arrs]
ptxforge.backend_sim.run(m, sim_out)
gpu_out = on_gpu(m, arrs)
gi, si = gpu_out[2].reshape(-1, n), sim_out[2].reshape(-1, n)
for j in range(len(ints)):
    if not np.array_equal(gi[j], si[j]):
        print("INT DIFF", j, ints[j], gi[j][:6], si[j][:6])
gf, sf = gpu_out[3].reshape(-1, n), sim_out[3].reshape(-1, n)
for j in range(len(floats)):
    d = np.nanmax(np.abs(gf[j] - sf[j]) / (np.abs(sf[j]) + 1e-6))
    nanmis = (np.isnan(gf[j]) != np.isnan(sf[j])).sum()
    print("float", j, floats[j], "rel", d, "nan mismatch", nanmis)

for name in sorted(WORKLOADS):
    rng = np.random.default_rng(7)
    done = tries = 0
    worst = 0.0
    while done < per and tries < 6 * per:
        tries += 1
        t, ref = WORKLOADS[name]()
        try:
            s = random_schedule(t, rng)
            f = ptxforge.build(s, t, target="cuda")
        except IRError:
            continue
        ins = [np.random.default_rng(tries).uniform(-1, 1, size=x.shape).astype("float32")
               for x in t[:-1]]
        o_sim = np.zeros(t[-1].shape, np.float32)
        f(*ins, o_sim)
        d_in = [ptxforge.nd.array(x, dev) for x in ins]
        out = ptxforge.nd.empty(t[-1].shape, "float32", dev)
        f(*d_in, out)
        o_gpu = out.numpy()
        d = float(np.abs(o_gpu - o_sim).max() / (np.abs(o_sim).max() + 1e-30))
        worst = max(worst, d)
        done += 1
        if d > 1e-5:
            print("MISMATCH", name, d, s.pipeline.text[:400])
    print(name, done, "schedules, worst rel diff gpu vs sim", worst, f"{time.time()-t0:.0f}s")
