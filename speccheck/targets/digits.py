"""Small diffusion models of scikit-learn's 8x8 digits, trained on CPU in minutes.

Data: ``sklearn.datasets.load_digits`` (1797 images, 10 classes; shipped inside scikit-learn),
pixels scaled from [0, 16] to [-1, 1], shape [1, 8, 8]; a fixed split (seed 0) holds out 20%.

(a) ``digits-edm``: an EDM-preconditioned class-conditional denoiser (:class:`DigitsMLP` inside
    :class:`speccheck.targets.edm.EDMPrecond`), trained with the EDM loss -> :class:`EDMTarget`.
(b) ``digits-flow``: a rectified-flow velocity model built from diffusers' SD3Transformer2DModel
    (tiny config); each class (and a null class for guidance, label dropout 10%) is a learned
    token for ``encoder_hidden_states`` plus a learned pooled vector -> :class:`SD3Target`,
    i.e. the SD3 code path with a trained network.
Checkpoints: torch-saved dicts {"arch", "config", "state_dict", "meta"}. Shipped ones live in
speccheck/data/ (read-only); ``speccheck train-digits`` writes to the user cache
(``$SPECCHECK_CACHE_DIR/digits`` or ``~/.cache/speccheck/digits``), never into the installed
package, and a checkpoint there is preferred over the shipped one. Training that reaches a
non-finite loss writes nothing.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, Callable, Optional

import numpy as np
import torch
from torch import nn

from speccheck.errors import InputError, LoadError, SpeccheckError
from speccheck.targets.edm import EDMPrecond, EDMTarget, edm_training_loss, load_edm_denoiser
from speccheck.targets.sd3 import SD3Target

DATA_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
EDM_CHECKPOINT = os.path.join(DATA_DIR, "digits_edm.pt")
FLOW_CHECKPOINT = os.path.join(DATA_DIR, "digits_flow.pt")
STATE_SHAPE = (1, 8, 8)
N_CLASSES = 10
CHECKPOINT_FILES = {"digits-edm": "digits_edm.pt", "digits-flow": "digits_flow.pt"}


class TrainingDivergedError(SpeccheckError):
    """The training loss (or a trained weight) became NaN or infinite; nothing was written."""


def user_checkpoint_dir() -> str:
    """Where ``train-digits`` writes by default: ``$SPECCHECK_CACHE_DIR/digits``, else
    ``~/.cache/speccheck/digits``. An empty SPECCHECK_CACHE_DIR (cache off) has no default."""
    root = os.environ.get("SPECCHECK_CACHE_DIR")
    if root is None:
        root = os.path.join(os.path.expanduser("~"), ".cache", "speccheck")
    elif not root:
        raise InputError("SPECCHECK_CACHE_DIR is empty (cache off): give --out for the trained checkpoints")
    return os.path.join(root, "digits")


def default_checkpoint(kind: str) -> str:
    """The checkpoint read when none is given: the user's trained one if it exists, else the shipped one."""
    if kind not in CHECKPOINT_FILES:
        raise InputError(f"unknown digits model {kind!r}; choose 'digits-edm' or 'digits-flow'")
    try:
        user = os.path.join(user_checkpoint_dir(), CHECKPOINT_FILES[kind])
    except InputError:
        user = ""
    return user if user and os.path.isfile(user) else os.path.join(DATA_DIR, CHECKPOINT_FILES[kind])


# --------------------------------------------------------------------------- data
def load_digits_data() -> tuple[torch.Tensor, torch.Tensor]:
    """All 1797 digits: x [1797, 1, 8, 8] float32 in [-1, 1], labels [1797] int64."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:  # pragma: no cover - scikit-learn is a test dependency
        raise ImportError("the digits models need scikit-learn (pip install scikit-learn)") from exc
    d = load_digits()
    x = torch.as_tensor(d.data, dtype=torch.float32).reshape(-1, *STATE_SHAPE) / 8.0 - 1.0
    return x, torch.as_tensor(d.target, dtype=torch.long)


def digits_split(seed: int = 0, held_out: float = 0.2) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x_train, y_train, x_test, y_test): a fixed random split (numpy default_rng(seed))."""
    x, y = load_digits_data()
    perm = torch.as_tensor(np.random.default_rng(seed).permutation(x.shape[0]))
    n_test = int(round(held_out * x.shape[0]))
    te, tr = perm[:n_test], perm[n_test:]
    return x[tr], y[tr], x[te], y[te]


# --------------------------------------------------------------------------- networks
class FourierFeatures(nn.Module):
    """c -> [sin(2 pi f c), cos(2 pi f c)] with fixed log-spaced frequencies f in [1/8, 16]."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.register_buffer("freqs", torch.exp(torch.linspace(math.log(1 / 8), math.log(16.0), n)))

    def forward(self, c: torch.Tensor) -> torch.Tensor:
        a = 2 * math.pi * c.reshape(-1, 1) * self.freqs.to(c.dtype)
        return torch.cat([a.sin(), a.cos()], dim=1)


class DigitsMLP(nn.Module):
    """Raw EDM network F(x_in [R,1,8,8], c_noise [R], labels [R,10] | None) -> [R,1,8,8]:
    residual MLP whose blocks add an embedding of (c_noise, label)."""

    def __init__(self, hidden: int = 192, blocks: int = 3, n_freq: int = 16, label_dim: int = N_CLASSES,
                 d: int = 64) -> None:
        super().__init__()
        self.config = dict(hidden=hidden, blocks=blocks, n_freq=n_freq, label_dim=label_dim, d=d)
        self.fourier = FourierFeatures(n_freq)
        self.t_emb = nn.Sequential(nn.Linear(2 * n_freq, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        self.c_emb = nn.Linear(label_dim, hidden, bias=False) if label_dim else None
        self.inp = nn.Linear(d, hidden)
        self.norms = nn.ModuleList([nn.LayerNorm(hidden) for _ in range(blocks)])
        self.lin1 = nn.ModuleList([nn.Linear(hidden, 2 * hidden) for _ in range(blocks)])
        self.lin2 = nn.ModuleList([nn.Linear(2 * hidden, hidden) for _ in range(blocks)])
        self.out_norm = nn.LayerNorm(hidden)
        self.out = nn.Linear(hidden, d)

    @classmethod
    def from_config(cls, config: dict) -> "EDMPrecond":
        """The full EDM denoiser (preconditioning included) for a saved config."""
        cfg = dict(config)
        sigma_data = cfg.pop("sigma_data", 0.5)
        net = cls(**cfg)
        return EDMPrecond(net, STATE_SHAPE, label_dim=net.config["label_dim"], sigma_data=sigma_data)

    def forward(self, x: torch.Tensor, c_noise: torch.Tensor, labels: Optional[torch.Tensor]) -> torch.Tensor:
        e = self.t_emb(self.fourier(c_noise))
        if self.c_emb is not None:
            e = e + self.c_emb(labels.to(x.dtype))
        h = self.inp(x.flatten(1)) + e
        for norm, l1, l2 in zip(self.norms, self.lin1, self.lin2):
            h = h + l2(nn.functional.silu(l1(nn.functional.silu(norm(h) + e))))
        return self.out(self.out_norm(h)).reshape(x.shape)


def make_digits_edm(hidden: int = 192, blocks: int = 3) -> EDMPrecond:
    """Untrained class-conditional EDM denoiser for the digits."""
    return DigitsMLP.from_config(dict(hidden=hidden, blocks=blocks))


FLOW_TRANSFORMER_CONFIG = dict(
    sample_size=8, patch_size=2, in_channels=1, out_channels=1, num_layers=2,
    attention_head_dim=32, num_attention_heads=2, joint_attention_dim=32,
    caption_projection_dim=64, pooled_projection_dim=32, pos_embed_max_size=4,
)


class DigitsFlow(nn.Module):
    """SD3Transformer2DModel + learned class conditioning. Class index 10 is the null class."""

    def __init__(self, transformer_config: Optional[dict] = None, n_classes: int = N_CLASSES,
                 n_tokens: int = 2) -> None:
        super().__init__()
        from diffusers import SD3Transformer2DModel

        cfg = dict(FLOW_TRANSFORMER_CONFIG if transformer_config is None else transformer_config)
        self.config = dict(transformer_config=cfg, n_classes=n_classes, n_tokens=n_tokens)
        self.transformer = SD3Transformer2DModel(**cfg)
        self.tokens = nn.Parameter(0.5 * torch.randn(n_classes + 1, n_tokens, cfg["joint_attention_dim"]))
        self.pooled = nn.Parameter(0.5 * torch.randn(n_classes + 1, cfg["pooled_projection_dim"]))
        self.n_classes = n_classes

    @classmethod
    def from_config(cls, config: dict) -> "DigitsFlow":
        return cls(**config)

    def forward(self, x: torch.Tensor, t: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """v_t(x | label) for training; labels in [0, n_classes] (n_classes = unconditional)."""
        return self.transformer(
            hidden_states=x, encoder_hidden_states=self.tokens[labels], pooled_projections=self.pooled[labels],
            timestep=1000 * t, return_dict=False,
        )[0]

    def target(self, guidance_scale: float = 1.0, **kw: Any) -> SD3Target:
        """SD3Target whose prompts are the 10 classes (cond = digit label), null class as negative."""
        with torch.no_grad():
            k = self.n_classes
            return SD3Target(
                self.transformer, self.tokens[:k].detach().clone(), self.pooled[:k].detach().clone(),
                self.tokens[k].detach().clone(), self.pooled[k].detach().clone(), guidance_scale=guidance_scale,
                state_shape=STATE_SHAPE, **kw,
            )


# --------------------------------------------------------------------------- training
class _EMA:
    def __init__(self, model: nn.Module, decay: float) -> None:
        self.decay = decay
        self.shadow = {k: v.detach().clone() for k, v in model.state_dict().items()}

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        for k, v in model.state_dict().items():
            if v.dtype.is_floating_point:
                self.shadow[k].lerp_(v, 1 - self.decay)
            else:
                self.shadow[k].copy_(v)


def _train(model: nn.Module, loss_fn: Callable, steps: int, batch: int, lr: float, seed: int,
           ema_decay: float, log: Optional[Callable[[str], None]]) -> dict:
    x, y, _, _ = digits_split()
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 200) * (0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)) * 0.9 + 0.1)
    )
    ema = _EMA(model, ema_decay)
    t0, run = time.time(), 0.0
    for step in range(steps):
        idx = torch.randint(0, x.shape[0], (batch,), generator=g)
        loss = loss_fn(model, x[idx], y[idx], g)
        loss_value = float(loss.item())
        if not math.isfinite(loss_value):
            raise TrainingDivergedError(f"training loss is {loss_value} at step {step} (batch={batch}, lr={lr}); "
                                        "no checkpoint was written")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        ema.update(model)
        run = 0.98 * run + 0.02 * loss_value if step else loss_value
        if log and (step % 500 == 0 or step == steps - 1):
            log(f"step {step:5d}  loss {run:.4f}  {time.time() - t0:.0f}s")
    model.load_state_dict(ema.shadow)
    bad = [k for k, v in model.state_dict().items() if v.dtype.is_floating_point and not bool(torch.isfinite(v).all())]
    if bad:
        raise TrainingDivergedError(f"trained weights {bad[:3]} are not finite; no checkpoint was written")
    return {"steps": steps, "batch": batch, "lr": lr, "seed": seed, "ema_decay": ema_decay,
            "final_loss": run, "train_seconds": round(time.time() - t0, 1)}


def _edm_loss(model, x0, labels, g):
    return edm_training_loss(model, x0, nn.functional.one_hot(labels, N_CLASSES).float(), generator=g)


def _flow_loss(model, x0, labels, g, p_drop: float = 0.1):
    R = x0.shape[0]
    t = torch.sigmoid(torch.randn(R, generator=g))                 # logit-normal(0, 1) times (SD3)
    noise = torch.randn(x0.shape, generator=g)
    b = t.reshape(-1, 1, 1, 1)
    xt = (1 - b) * x0 + b * noise
    drop = torch.rand(R, generator=g) < p_drop
    labels = torch.where(drop, torch.full_like(labels, N_CLASSES), labels)
    return (model(xt, t, labels) - (noise - x0)).pow(2).mean()


def check_training_options(steps: int, batch: int, lr: float, seed: int) -> None:
    """steps >= 1, batch in [1, 4096], lr finite in (0, 1], seed >= 0; InputError naming the value."""
    if steps < 1:
        raise InputError(f"steps must be >= 1, got steps={steps}")
    if not 1 <= batch <= 4096:
        raise InputError(f"batch must be in [1, 4096], got batch={batch}")
    if not (math.isfinite(lr) and 0 < lr <= 1):
        raise InputError(f"lr must be finite and in (0, 1], got lr={lr}")
    if seed < 0:
        raise InputError(f"seed must be >= 0, got seed={seed}")


def train_digits_edm(steps: int = 6000, batch: int = 256, lr: float = 2e-3, seed: int = 0,
                     log: Optional[Callable[[str], None]] = None) -> tuple[EDMPrecond, dict]:
    """Train the EDM denoiser (model seeded with ``seed``); returns (denoiser, training meta)."""
    check_training_options(steps, batch, lr, seed)
    torch.manual_seed(seed)
    model = make_digits_edm()
    meta = _train(model, _edm_loss, steps, batch, lr, seed, 0.999, log)
    return model.eval(), meta


def train_digits_flow(steps: int = 2000, batch: int = 256, lr: float = 1e-3, seed: int = 0,
                      log: Optional[Callable[[str], None]] = None) -> tuple[DigitsFlow, dict]:
    """Train the rectified-flow SD3 transformer; returns (model, training meta)."""
    check_training_options(steps, batch, lr, seed)
    torch.manual_seed(seed)
    model = DigitsFlow()
    meta = _train(model, _flow_loss, steps, batch, lr, seed, 0.998, log)
    return model.eval(), meta


def save_checkpoint(model: nn.Module, arch: str, path: str, meta: Optional[dict] = None) -> None:
    """torch.save({"arch", "config", "state_dict", "meta"}) (loadable with weights_only=True)."""
    config = dict(model.net.config, sigma_data=model.sigma_data) if isinstance(model, EDMPrecond) else model.config
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{os.path.basename(path)}.partial")
    torch.save({"arch": arch, "config": config, "state_dict": model.state_dict(), "meta": meta or {}}, tmp)
    os.replace(tmp, path)


def load_digits_flow(path: Optional[str] = None) -> DigitsFlow:
    """The trained digits-flow model (default: the shipped checkpoint)."""
    path = path or default_checkpoint("digits-flow")
    if not os.path.isfile(path):
        raise LoadError(f"weights file not found: weights={path!r} (run `speccheck train-digits`)")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is a load error naming it
        raise LoadError(f"weights file {path!r} is not a readable torch checkpoint ({type(exc).__name__})") from None
    if not isinstance(obj, dict) or obj.get("arch") != "digits-flow":
        raise LoadError(f"{path!r} is not a digits-flow checkpoint")
    model = DigitsFlow.from_config(obj["config"])
    model.load_state_dict(obj["state_dict"])
    return model.eval()


def digits_target(kind: str, weights: Optional[str] = None, guidance_scale: float = 1.0,
                  device: str | torch.device = "cpu") -> "EDMTarget | SD3Target":
    """VelocityModel for ``digits-edm`` (EDMTarget) or ``digits-flow`` (SD3Target); cond = digit label."""
    if kind == "digits-edm":
        path = weights or default_checkpoint("digits-edm")
        if not os.path.isfile(path):
            raise LoadError(f"weights file not found: weights={path!r} (run `speccheck train-digits`)")
        return EDMTarget(load_edm_denoiser(path), state_shape=STATE_SHAPE, label_dim=N_CLASSES, device=device)
    if kind == "digits-flow":
        return load_digits_flow(weights).to(device).target(guidance_scale=guidance_scale, device=device)
    raise InputError(f"unknown digits model {kind!r}; choose 'digits-edm' or 'digits-flow'")


# --------------------------------------------------------------------------- held-out check
@torch.no_grad()
def sample_chain(target: Any, schedule: Any, cond: torch.Tensor, generator: torch.Generator,
                 dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The plain (non-speculative) churn chain of SPEC section 3 on a Schedule, x_0 ~ N(0, I):
    x <- a_n x + c_n v_{t_n}(x) + sigma_n z. Returns final states [R, *state_shape]."""
    R = cond.shape[0]
    x = torch.randn((R, *target.state_shape), generator=generator, dtype=dtype)
    for n in range(schedule.N):
        t = torch.full((R,), float(schedule.t[n]), dtype=dtype)
        v = target.velocity(x, t, cond)
        x = schedule.a[n] * x + schedule.c[n] * v
        if schedule.sigma[n] > 0:
            x = x + schedule.sigma[n] * torch.randn(x.shape, generator=generator, dtype=dtype)
    return x


def fit_digit_classifier(seed: int = 0) -> tuple[object, float]:
    """(classifier, held-out accuracy on real digits): LogisticRegression on the training split."""
    from sklearn.linear_model import LogisticRegression

    xtr, ytr, xte, yte = digits_split()
    clf = LogisticRegression(max_iter=3000, C=1.0, random_state=seed)
    clf.fit(xtr.flatten(1).numpy(), ytr.numpy())
    return clf, float(clf.score(xte.flatten(1).numpy(), yte.numpy()))


def classify_samples(samples: torch.Tensor, labels: torch.Tensor, clf: Any = None) -> float:
    """Fraction of samples (clipped to [-1, 1]) that the real-digit classifier labels as ``labels``."""
    clf = clf if clf is not None else fit_digit_classifier()[0]
    pred = clf.predict(samples.detach().clamp(-1, 1).flatten(1).double().cpu().numpy())
    return float((pred == labels.detach().cpu().numpy()).mean())


def heldout_check(target: Any, n_per_class: int = 50, steps: int = 30, eps: float = 0.3, seed: int = 1) -> dict:
    """Generate n_per_class samples per digit with the plain chain (flow grid) and report the
    classifier's agreement with the requested labels (chance = 0.1) and its real held-out accuracy."""
    from speccheck.targets.schedules import flow_matching

    labels = torch.arange(N_CLASSES).repeat_interleave(n_per_class)
    x = sample_chain(target, flow_matching(steps, eps), labels, torch.Generator().manual_seed(seed))
    clf, acc_real = fit_digit_classifier()
    rate = classify_samples(x, labels, clf)
    n = labels.numel()
    return {"label_agreement": rate, "label_agreement_se": math.sqrt(rate * (1 - rate) / n), "n": n,
            "classifier_heldout_accuracy": acc_real, "chance": 1 / N_CLASSES,
            "sampler": f"plain churn chain, flow grid N={steps}, eps={eps}, seed={seed}"}


# --------------------------------------------------------------------------- train-digits
def train_and_save(which: str = "both", out_dir: Optional[str] = None, steps_edm: int = 4000, steps_flow: int = 1500,
                   batch: int = 256, seed: int = 0, check_per_class: int = 50,
                   log: Optional[Callable[[str], None]] = None) -> dict:
    """Train the selected models, then (only if every one trained to a finite loss) write them
    to ``out_dir`` (default :func:`user_checkpoint_dir`) and run the held-out check.
    Returns {kind: {path, bytes, training meta, heldout_check}}."""
    if which not in ("edm", "flow", "both"):
        raise InputError(f"which must be 'edm', 'flow' or 'both', got {which!r}")
    if not 0 <= check_per_class <= 1000:
        raise InputError(f"check_per_class must be in [0, 1000], got {check_per_class}")
    out_dir = out_dir if out_dir is not None else user_checkpoint_dir()
    jobs = []
    if which in ("edm", "both"):
        check_training_options(steps_edm, batch, 2e-3, seed)
        jobs.append(("digits-edm", "digits-mlp", lambda lg: train_digits_edm(steps=steps_edm, batch=batch,
                                                                               seed=seed, log=lg)))
    if which in ("flow", "both"):
        check_training_options(steps_flow, batch, 1e-3, seed)
        jobs.append(("digits-flow", "digits-flow", lambda lg: train_digits_flow(steps=steps_flow, batch=batch,
                                                                                 seed=seed, log=lg)))
    trained = []
    for kind, arch, train in jobs:
        model, meta = train((lambda m, k=kind: log(f"[{k}] {m}")) if log else None)
        trained.append((kind, arch, model, meta))
    report = {}
    for kind, arch, model, meta in trained:
        path = os.path.join(out_dir, CHECKPOINT_FILES[kind])
        save_checkpoint(model, arch, path, meta)
        entry = {"path": path, "bytes": os.path.getsize(path), **meta}
        if check_per_class > 0:
            entry["heldout_check"] = heldout_check(digits_target(kind, path), n_per_class=check_per_class)
        report[kind] = entry
    return report
