"""Code generation of tensorized loop nests for the simulator: the nest under a loop marked
with a tensor intrinsic becomes one call into :mod:`.tensorcore` for the whole chunk."""

from __future__ import annotations

from ..ir.intrin import ANNOTATION, IntrinError
from ..ir.intrin.match import match_nest
from ..ir.stmt import For
from .errors import SimIRError


def emit_tensor_intrin(gen, s: For, B) -> None:
    """Emit the call that runs the nest under ``s`` as its intrinsic (``gen``: the kernel
    generator, ``B``: the block of code)."""
    name = s.annotations[ANNOTATION]
    try:
        bound = match_nest(s, name, f"kernel {gen.name}, loop {s.var.name}", device=True)
    except IntrinError as e:
        raise SimIRError(str(e)) from None
    spec = bound.intrin
    key = f"_spec_{spec.name}"
    gen.constants[key] = spec
    B = gen.room(B)
    mask = B.mask or "None"

    def code(e):
        return gen.mat(gen.ex(e, B), B)

    def frag(opname):
        op = bound.operands[opname]
        info = gen.facts.buffer(op.buffer)
        return info.code, code(bound.frag_slot(opname))

    def mem(opname):
        op = bound.operands[opname]
        info = gen.facts.buffer(op.buffer)
        offset = info.offset if info.scope == "shared" and info.offset else "None"
        race = info.race or "None"
        m = gen.tmp("mem")
        B.line(f"{m} = _tc.Mem({info.code}, {offset}, {race}, {info.size}, "
               f"{op.buffer.name!r}, {info.scope!r})")
        return m, code(op.base), op.ld

    if spec.warpgroup:
        # warpgroup intrinsics: the chunk's wgmma state runs them
        def acc(opname):
            op = bound.operands[opname]
            f_code, slot = frag(opname)
            return f"{f_code}, {op.buffer.name!r}, {slot}"

        if spec.kind == "wgmma" and spec.role("A") is not None:
            # A from the warpgroup's registers (the "RS" form)
            b, b_base, _ = mem("B")
            B.line(f"_W.mma_rs({mask}, {key}, {acc('C')}, {acc('A')}, {b}, {b_base})")
        elif spec.kind == "wgmma":
            (a, a_base, _), (b, b_base, _) = mem("A"), mem("B")
            B.line(f"_W.mma({mask}, {key}, {acc('C')}, {a}, {a_base}, {b}, {b_base})")
        elif spec.kind == "fill":
            B.line(f"_W.fill({mask}, {key}, {acc('C')})")
        elif spec.kind == "store":
            m, base, ld = mem("M")
            alpha = bound.operands.get("alpha")
            scale = "" if alpha is None else f", {code(alpha.base)}"
            B.line(f"_W.store({mask}, {key}, {m}, {base}, {ld}, {acc('F')}{scale})")
        else:
            raise SimIRError(f"kernel {gen.name}: {spec.name} ({spec.kind}) has no warpgroup "
                             "form in the simulator")
        return
    head = f"_tc.{spec.kind}(_C, {mask}, {key}"
    if spec.kind == "mma":
        (c, cs), (a, as_), (b, bs) = frag("C"), frag("A"), frag("B")
        B.line(f"{head}, {c}, {cs}, {a}, {as_}, {b}, {bs})")
    elif spec.kind == "fill":
        c, cs = frag("C")
        B.line(f"{head}, {c}, {cs})")
    elif spec.kind == "ldmatrix":
        role = spec.role("F")
        ntiles = max(1, spec.num // len(role.blocks))
        f_code, _ = frag("F")
        slots = [code(bound.frag_slot("F", t)) for t in range(ntiles)]
        m, base, ld = mem("S")
        B.line(f"{head}, {f_code}, [{', '.join(slots)}], {m}, {base}, {ld})")
    elif spec.kind == "load":
        f_code, fs = frag("F")
        m, base, ld = mem("M")
        B.line(f"{head}, {f_code}, {fs}, {m}, {base}, {ld})")
    else:
        f_code, fs = frag("F")
        m, base, ld = mem("M")
        B.line(f"{head}, {m}, {base}, {ld}, {f_code}, {fs})")
