# ruff: noqa: E501, E702, E402  (vendored copy of the shared tool, kept close to the original)
"""(Carried copy of ../shared/tools/fakecuda/fakecuda.py.) Fake-CUDA harness for a CPU-only torch build.

Tensors created "on cuda" are CPU tensors wrapped in FC, a wrapper subclass whose .device is
cuda:0. Every aten op on them is run on the wrapped CPU data and
  * counted (a proxy for CUDA kernel launches),
  * checked for the device rules a real GPU enforces (CPU tensor with dim > 0 mixed into a CUDA
    op; CPU generator for a CUDA random op and vice versa; .numpy() on a CUDA tensor),
  * classified as a host<->device sync point when it is one on CUDA (item/bool/float/int,
    nonzero, boolean-mask indexing, unique, D2H copies, pageable H2D copies, tolist, equal).
Violations are recorded (file:line of the innermost speccheck frame) and execution continues,
so one run lists every problem.
"""
from __future__ import annotations

import collections
import contextlib
import sys
import traceback

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

CUDA = torch.device("cuda", 0)
aten = torch.ops.aten

EVENTS = collections.Counter()                       # kind -> count
SITES = collections.defaultdict(collections.Counter)  # kind -> {site: count}
ERRORS = collections.defaultdict(collections.Counter)  # would-raise kind -> {site: count}
OPS = collections.Counter()                          # aten op name -> count (non-view ops on FC)


def reset():
    EVENTS.clear(); SITES.clear(); ERRORS.clear(); OPS.clear()


def _site(depth=6):
    frames = traceback.extract_stack()[:-2]
    out = []
    for fr in reversed(frames):
        f = fr.filename
        if "fakecuda" in f:
            continue
        if "/speccheck/" in f or "/benchmarks/" in f or "/tests/" in f:
            p = f.split("/speccheck/", 1)[-1] if "/speccheck/" in f else f.rsplit("/", 2)[-2] + "/" + f.rsplit("/", 1)[-1]
            out.append(f"{p}:{fr.lineno}")
            if len(out) >= 1:
                break
    return out[0] if out else "?"


def _event(kind, n=1):
    EVENTS[kind] += n
    SITES[kind][_site()] += n


def _error(kind):
    ERRORS[kind][_site()] += 1


class FakeCudaGen(torch.Generator):
    """A CPU generator standing in for torch.Generator(device='cuda')."""

    @property
    def device(self):  # noqa: D401
        return CUDA


def cuda_generator(seed=None):
    g = FakeCudaGen()
    if seed is not None:
        g.manual_seed(seed)
    return g


def _is_fc(t):
    return isinstance(t, FC)


VIEW_OPS = {
    "view", "_unsafe_view", "t", "transpose", "expand", "slice", "select", "unsqueeze", "squeeze",
    "permute", "as_strided", "alias", "detach", "unfold", "diagonal", "split", "chunk", "unbind",
    "narrow", "view_as", "reshape", "flatten", "_reshape_alias", "lift_fresh", "split_with_sizes",
    "unsafe_split", "movedim", "real", "imag", "expand_as", "resolve_conj", "resolve_neg",
}
RANDOM_OPS = {"rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "randperm", "normal",
              "bernoulli", "multinomial", "uniform_", "normal_", "exponential_", "bernoulli_", "random_",
              "geometric_", "cauchy_", "log_normal_", "poisson"}
SYNC_OPS = {"nonzero": "nonzero", "masked_select": "masked_select", "_unique2": "unique", "unique_dim": "unique",
            "unique_consecutive": "unique_consecutive", "_unique": "unique", "equal": "equal",
            "_local_scalar_dense": "item/bool/float/int", "repeat_interleave": "repeat_interleave",
            "nonzero_numpy": "nonzero", "argwhere": "nonzero", "masked_scatter_": "masked_scatter",
            "is_nonzero": "item/bool/float/int"}


class FC(torch.Tensor):
    elem: torch.Tensor

    @staticmethod
    def __new__(cls, elem):
        assert not isinstance(elem, FC)
        r = torch.Tensor._make_wrapper_subclass(
            cls, elem.shape, strides=elem.stride(), storage_offset=elem.storage_offset(),
            dtype=elem.dtype, device=CUDA, requires_grad=elem.requires_grad)
        r.elem = elem
        return r

    __torch_function__ = torch._C._disabled_torch_function_impl

    def __repr__(self):
        return f"FC({self.elem!r})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        flat, _ = tree_flatten((args, kwargs))
        tensors = [t for t in flat if isinstance(t, torch.Tensor)]
        any_fc = any(_is_fc(t) for t in tensors)
        cpu_big = [t for t in tensors if not _is_fc(t) and t.device.type == "cpu" and t.dim() > 0]
        # ---- device rules
        if name in ("copy_",):
            dst, src = args[0], args[1]
            if _is_fc(dst) and not _is_fc(src):
                _event("H2D copy_ (sync, pageable)")
            elif _is_fc(src) and not _is_fc(dst):
                _event("D2H copy_ (sync)")
        elif name == "_to_copy":
            dev = kwargs.get("device")
            if dev is not None and torch.device(dev).type == "cpu" and _is_fc(args[0]):
                _event("D2H .cpu()/.to(cpu) (sync)")
                out = func(args[0].elem, **{**kwargs, "device": torch.device("cpu")})
                return out
        elif name in ("index", "_index_put_impl_", "index_put_", "index_put"):
            self_t = args[0]
            idx = [t for t in (args[1] or []) if isinstance(t, torch.Tensor)]
            if _is_fc(self_t):
                if name != "index" and len(args) > 2 and isinstance(args[2], torch.Tensor) and not _is_fc(args[2]) and args[2].dim() > 0:
                    _error(f"{name}: CPU values into CUDA tensor")
            else:
                if any(_is_fc(t) for t in idx):
                    _error(f"{name}: CPU tensor indexed with CUDA index")
                if name != "index" and len(args) > 2 and _is_fc(args[2]):
                    _error(f"{name}: CUDA values into CPU tensor")
            if any_fc and any(t.dtype in (torch.bool, torch.uint8) for t in idx):
                _event(f"bool-mask {name} (nonzero sync)")
        elif any_fc and cpu_big:
            _error(f"{name}: CPU tensor (dim>0) mixed with CUDA tensors")
        if any_fc or name in RANDOM_OPS:
            gen = kwargs.get("generator")
            if gen is not None:
                if isinstance(gen, FakeCudaGen) and not any_fc:
                    _error(f"{name}: CUDA generator used for a CPU tensor")
                elif any_fc and not isinstance(gen, FakeCudaGen):
                    _error(f"{name}: CPU generator used for a CUDA tensor")
        if any_fc and name in SYNC_OPS:
            if name == "repeat_interleave" and kwargs.get("output_size") is not None:
                pass
            else:
                _event(SYNC_OPS[name])
        if any_fc and name not in VIEW_OPS:
            OPS[name] += 1

        def unwrap(t):
            if _is_fc(t):
                return t.elem
            return t

        def fix_dev(x):
            if isinstance(x, torch.device) and x.type == "cuda":
                return torch.device("cpu")
            return x
        uargs = tree_map(unwrap, args)
        ukw = tree_map(unwrap, kwargs)
        ukw = {k: (fix_dev(v) if k == "device" else v) for k, v in ukw.items()}
        out = func(*uargs, **ukw)
        if name == "_local_scalar_dense" or not any_fc:
            return out
        # in-place / out=: return the original wrapper
        schema = func._schema
        if schema.returns and any(r.alias_info is not None and r.alias_info.is_write for r in schema.returns):
            # mutable return aliases an input
            if "out" in kwargs:
                return kwargs["out"]
            return args[0]

        def wrap(t):
            if isinstance(t, torch.Tensor) and not isinstance(t, FC):
                return FC(t)
            return t
        return tree_map(wrap, out)


def _idx_list(idx):
    return list(idx) if isinstance(idx, tuple) else [idx]


def _item_access(func, args):
    self_t, idx = args[0], args[1]
    parts = _idx_list(idx)
    tens = [p for p in parts if isinstance(p, torch.Tensor)]
    self_fc = _is_fc(self_t)
    getter = func is torch.Tensor.__getitem__
    what = "getitem" if getter else "setitem"
    if not self_fc and any(_is_fc(t) for t in tens):
        _error(f"{what}: CPU tensor indexed with a CUDA index")
    if (self_fc or any(_is_fc(t) for t in tens)) and any(t.dtype in (torch.bool, torch.uint8) for t in tens):
        _event(f"bool-mask {what} (nonzero sync)")
    if not getter:
        value = args[2]
        if self_fc and isinstance(value, torch.Tensor) and not _is_fc(value) and value.dim() > 0:
            if tens:
                _error("setitem: CPU values (dim>0) into a CUDA tensor with tensor indices")
            else:
                _event("H2D setitem copy (sync, pageable)")
        if not self_fc and _is_fc(value):
            if tens:
                _error("setitem: CUDA values into a CPU tensor with tensor indices")
            else:
                _event("D2H setitem copy (sync)")
    uidx = tuple(p.elem if _is_fc(p) else p for p in parts) if isinstance(idx, tuple) else (idx.elem if _is_fc(idx) else idx)
    ue = self_t.elem if self_fc else self_t
    if self_fc or any(_is_fc(t) for t in tens):
        OPS[what + ("(adv)" if tens else "(basic)")] += 1
    with torch._C.DisableTorchFunction():
        if getter:
            r = ue[uidx]
            return FC(r) if (self_fc and isinstance(r, torch.Tensor)) else r
        v = args[2]
        v = v.elem if _is_fc(v) else v
        ue[uidx] = v
        return None


def _to_cpu_dev(d):
    if d is None:
        return None, False
    d = torch.device(d) if not isinstance(d, torch.device) else d
    if d.type == "cuda":
        return torch.device("cpu"), True
    return d, False


FACTORIES = {
    torch.rand, torch.randn, torch.randint, torch.randperm, torch.zeros, torch.ones, torch.empty, torch.full,
    torch.arange, torch.linspace, torch.logspace, torch.eye, torch.tensor, torch.as_tensor, torch.normal,
    torch.zeros_like, torch.ones_like, torch.empty_like, torch.full_like, torch.rand_like, torch.randn_like,
    torch.randint_like, torch.from_numpy, torch.scalar_tensor, torch.empty_strided,
}
RANDOM_FN = {torch.rand, torch.randn, torch.randint, torch.randperm, torch.normal, torch.rand_like,
             torch.randn_like, torch.randint_like, torch.bernoulli, torch.multinomial, torch.poisson}


class FakeCudaMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        # .numpy() / .tolist() / .cuda() / .to() on tensors
        fname = getattr(func, "__name__", str(func))
        if func is torch.Tensor.numpy:
            if _is_fc(args[0]):
                _error(".numpy() on a CUDA tensor (TypeError on a GPU)")
                return args[0].elem.numpy()
            return func(*args, **kwargs)
        if func in (torch.Tensor.__float__, torch.Tensor.__int__, torch.Tensor.__bool__, torch.Tensor.__index__,
                    torch.Tensor.item, torch.Tensor.__complex__):
            if _is_fc(args[0]):
                _event("item/bool/float/int")
                with torch._C.DisableTorchFunction():
                    return func(args[0].elem)
            return func(*args, **kwargs)
        if func in (torch.Tensor.__getitem__, torch.Tensor.__setitem__):
            return _item_access(func, args)
        if func is torch.Tensor.tolist:
            if _is_fc(args[0]):
                _event("tolist (sync)")
                return args[0].elem.tolist()
            return func(*args, **kwargs)
        if func is torch.Tensor.__array__ if hasattr(torch.Tensor, "__array__") else False:
            if _is_fc(args[0]):
                _error("np.asarray(CUDA tensor) (TypeError on a GPU)")
                return args[0].elem.__array__(*args[1:], **kwargs)
        if func in (torch.nonzero, torch.Tensor.nonzero, torch.argwhere):
            if _is_fc(args[0]):
                _event("nonzero")
                OPS["nonzero"] += 1
                with torch._C.DisableTorchFunction():
                    r = func(args[0].elem, *args[1:], **kwargs)
                return tree_map(lambda t: FC(t) if isinstance(t, torch.Tensor) else t, r)
            return func(*args, **kwargs)
        if func is torch.where and len(args) == 3:
            fcs = [a for a in args if _is_fc(a)]
            if fcs:
                ref = [a for a in args[1:] if isinstance(a, torch.Tensor)]
                dt = ref[0].dtype if ref else torch.get_default_dtype()
                args = tuple(torch.tensor(a, dtype=dt if isinstance(a, float) else (torch.int64 if isinstance(a, int) and not isinstance(a, bool) else torch.bool))
                             if (i > 0 and not isinstance(a, torch.Tensor)) else a for i, a in enumerate(args))
            return func(*args, **kwargs)
        _conv = {torch.Tensor.long: torch.int64, torch.Tensor.float: torch.float32, torch.Tensor.double: torch.float64,
                 torch.Tensor.int: torch.int32, torch.Tensor.bool: torch.bool, torch.Tensor.half: torch.float16,
                 torch.Tensor.bfloat16: torch.bfloat16}
        if func in _conv and _is_fc(args[0]):
            if args[0].dtype == _conv[func]:
                return args[0]
            return FC(args[0].elem.to(_conv[func]))
        if func is torch.Tensor.__invert__ and _is_fc(args[0]):
            return torch.bitwise_not(args[0])
        if func is torch.Tensor.cpu:
            if _is_fc(args[0]):
                _event("D2H .cpu() (sync)")
                return args[0].elem.clone()
            return func(*args, **kwargs)
        if func in (torch.Tensor.cuda,):
            if _is_fc(args[0]):
                return args[0]
            _event("H2D .cuda() (sync, pageable)")
            return FC(args[0].detach().clone())
        if func is torch.Tensor.to:
            # find a device argument
            dev = kwargs.get("device")
            rest = list(args[1:])
            for i, a in enumerate(rest):
                if isinstance(a, (str, torch.device)):
                    dev = a; rest[i] = None
                elif isinstance(a, torch.Tensor):
                    dev = a.device; rest[i] = a.dtype
            rest = [a for a in rest if isinstance(a, torch.dtype)]
            if dev is not None and torch.device(dev).type == "cuda" and not _is_fc(args[0]):
                _event("H2D .to(cuda) (sync, pageable)")
                kw = {k: v for k, v in kwargs.items() if k not in ("device", "non_blocking", "copy")}
                with torch._C.DisableTorchFunction():
                    out = args[0].to(*rest, **kw) if (rest or kw) else args[0]
                return FC(out.clone() if out is args[0] else out)
            if dev is not None and torch.device(dev).type == "cpu" and _is_fc(args[0]):
                _event("D2H .to(cpu) (sync)")
                kw = {k: v for k, v in kwargs.items() if k not in ("device", "non_blocking", "copy")}
                with torch._C.DisableTorchFunction():
                    return args[0].elem.to(*rest, **kw).clone()
            if dev is not None and torch.device(dev).type == "cuda" and _is_fc(args[0]):
                kw = {k: v for k, v in kwargs.items() if k not in ("device", "non_blocking", "copy")}
                if rest or kw:
                    return args[0].to(*rest, **kw)
                return args[0]
            return func(*args, **kwargs)
        # factories with device=cuda
        if func in FACTORIES or func in RANDOM_FN:
            dev, is_cuda = _to_cpu_dev(kwargs.get("device"))
            like = args[0] if args and isinstance(args[0], torch.Tensor) else None
            if func in (torch.as_tensor, torch.tensor) and like is not None and _is_fc(like):
                if kwargs.get("device") is None or is_cuda:
                    dt = kwargs.get("dtype") or (args[1] if len(args) > 1 and isinstance(args[1], torch.dtype) else None)
                    if dt is None or dt == like.dtype:
                        return like if func is torch.as_tensor else FC(like.elem.clone())
                    return FC(like.elem.to(dt))
                # to cpu
                _event("D2H as_tensor(cuda->cpu) (sync)")
                return func(like.elem, **kwargs)
            gen = kwargs.get("generator")
            out_cuda = is_cuda or (like is not None and _is_fc(like) and kwargs.get("device") is None)
            if func in RANDOM_FN and gen is not None:
                if out_cuda and not isinstance(gen, FakeCudaGen):
                    _error(f"{fname}: CPU generator used for a CUDA tensor")
                if not out_cuda and isinstance(gen, FakeCudaGen):
                    _error(f"{fname}: CUDA generator used for a CPU tensor")
            if is_cuda:
                kwargs["device"] = dev
                if func in (torch.as_tensor, torch.tensor, torch.from_numpy):
                    _event("H2D as_tensor/tensor(host data) (sync, pageable)")
                out = func(*args, **kwargs)
                OPS[f"factory:{fname}"] += 1
                return tree_map(lambda t: FC(t) if isinstance(t, torch.Tensor) and not _is_fc(t) else t, out)
            if like is not None and _is_fc(like):
                return func(*args, **kwargs)
            return func(*args, **kwargs)
        return func(*args, **kwargs)


from torch.utils._python_dispatch import TorchDispatchMode


class FactoryDispatchMode(TorchDispatchMode):
    """Catches factory ops with device=cuda issued from C++ composites (e.g. one_hot's zeros)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        dev = kwargs.get("device")
        flat, _ = tree_flatten((args, kwargs))
        has_fc = any(_is_fc(t) for t in flat if isinstance(t, torch.Tensor))
        if not has_fc and dev is not None and torch.device(dev).type == "cuda":
            kw = dict(kwargs); kw["device"] = torch.device("cpu")
            gen = kw.get("generator")
            if gen is not None and not isinstance(gen, FakeCudaGen):
                _error(f"{func.overloadpacket.__name__}: CPU generator used for a CUDA tensor")
            out = func(*args, **kw)
            OPS[f"factory:{func.overloadpacket.__name__}"] += 1
            return tree_map(lambda t: FC(t) if isinstance(t, torch.Tensor) and not _is_fc(t) else t, out)
        return func(*args, **kwargs)


@contextlib.contextmanager
def fake_cuda(patch_available=True):
    saved = torch.cuda.is_available
    saved_sync = torch.cuda.synchronize
    if patch_available:
        torch.cuda.is_available = lambda: True
        torch.cuda.synchronize = lambda *a, **k: _event("torch.cuda.synchronize")
    try:
        with FakeCudaMode(), FactoryDispatchMode():
            yield
    finally:
        torch.cuda.is_available = saved
        torch.cuda.synchronize = saved_sync


def report(title="", file=sys.stdout, top=12):
    print(f"=== {title}", file=file)
    if ERRORS:
        print("  WOULD RAISE ON CUDA:", file=file)
        for k, sites in ERRORS.items():
            print(f"    {k}: {dict(sites.most_common(top))}", file=file)
    else:
        print("  no device errors", file=file)
    tot_ops = sum(OPS.values())
    print(f"  ops on cuda tensors (~kernel launches): {tot_ops}", file=file)
    syncs = {k: v for k, v in EVENTS.items()}
    print(f"  sync/transfer events: {sum(syncs.values())}  {dict(syncs)}", file=file)
    for k, sites in SITES.items():
        print(f"    {k}: {dict(sites.most_common(top))}", file=file)
