"""A GLOBAL LSTM: one network trained across a fleet of series (torch, CPU, imported here only).

- Input: the last ``window`` points (default 48 = 4 h) scaled relative to the recent window
  (centre = mean of the last 12 points, scale = mean absolute one-step change of the window),
  so a level shift does not break it; per step also time-of-day and day-of-week (sin/cos).
  Besides the sequence, the head sees the same-time-yesterday values of the H target steps
  (scaled the same way) and the origin's time features.
- Output: direct multi-step, H steps x the trained quantiles (default p50 and p90), learned
  with the pinball loss; the mean forecast is the p50 head (what minimises absolute error).
- Training: windows from every series (stride and a per-series cap keep it small), the last
  ``val_fraction`` of each series' windows (in time) for validation, early stopping on the
  validation pinball loss, ``torch.set_num_threads(threads)`` set deliberately.
- ``save(path)`` writes a versioned checkpoint (state_dict + scaler + config);
  ``GlobalLSTM.load(path)`` restores it.

Per series, ``fit`` only remembers the history when the network is already trained on a fleet
(``fit_fleet``); without one it trains on that single series (small, slow, a last resort).
"""

from __future__ import annotations

import math
import time
from typing import Sequence

import numpy as np

from forecaster.models.base import Model, ModelError, clean_history, season_length

CHECKPOINT_VERSION = 1
_WHERE = ("engine", "workers", "storage_path")  # where it trains, not what it is: not in checkpoints
_DAY = 86400.0
_WEEK = 7 * _DAY


def _time_feats(t: np.ndarray) -> np.ndarray:
    """(..., 4): sin/cos of time of day and of day of week."""
    d = 2 * np.pi * (t % _DAY) / _DAY
    w = 2 * np.pi * (t % _WEEK) / _WEEK
    return np.stack([np.sin(d), np.cos(d), np.sin(w), np.cos(w)], axis=-1)


def _epoch(net, opt, loss_fn, data, perm, bs: int, rank: int, world: int) -> float:
    """One pass over ``perm`` in batches of ``bs``; under DDP this rank takes its slice of each
    batch. Returns the summed loss (of this rank's share: the caller sums over ranks)."""
    import torch

    Xs, Xe, Y = data
    tot = 0.0
    for i in range(0, len(Y), bs):
        b = perm[i : i + bs]
        mine = torch.tensor_split(b, world)[rank] if world > 1 else b
        opt.zero_grad()
        if len(mine):
            loss = loss_fn(net(Xs[mine], Xe[mine]), Y[mine], len(b) if world > 1 else None)
        else:  # this rank's share of a short last batch is empty: a zero gradient
            loss = sum(p.sum() for p in net.parameters()) * 0.0
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        tot += float(loss.detach()) * len(b) / world
    return tot


def _plain(obj):
    """``obj`` as what torch.load(weights_only=True) reads back: dicts, lists, str, int, float,
    bool, None (a numpy scalar becomes its Python value, a tuple a list)."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    raise ModelError(f"lstm checkpoint: {type(obj).__name__} {obj!r} is not plain data (dict, list, str, number, bool, None)")


class GlobalLSTM(Model):
    name = "lstm"
    min_points = 30

    DEFAULTS = dict(window=48, hidden=32, epochs=10, batch=256, lr=3e-3, threads=2, stride=3,
                    max_windows_per_series=200, val_fraction=0.15, patience=2, seed=0,
                    train_quantiles=(0.5, 0.9), horizon=12, max_seconds=420.0,
                    engine="local", workers=2, storage_path=None)  # engine ray: Ray Train

    def __init__(self, **params):
        super().__init__(**params)
        cfg = dict(self.DEFAULTS)
        cfg.update({k: v for k, v in params.items() if k in self.DEFAULTS})
        self.cfg = cfg
        self.window = int(cfg["window"])
        self.H = int(cfg["horizon"])
        self.tq = tuple(float(q) for q in cfg["train_quantiles"])
        if 0.5 not in self.tq:
            raise ModelError("lstm.train_quantiles must include 0.5 (the point forecast)")
        self.net_ = params.get("_net")  # shared across clones
        self.t0_ = 0.0
        self.step_ = 300.0
        self.train_report_: dict = {}

    @property
    def history_points(self) -> int:  # type: ignore[override]
        return max(self.window, (self.season or 288) + self.H) + 1

    def new(self) -> "GlobalLSTM":
        clone = GlobalLSTM(**{**self.params, "_net": self.net_})
        clone.name = self.name
        clone.train_report_ = self.train_report_
        return clone

    # --- data --------------------------------------------------------------------------
    def _windows(self, y: np.ndarray, t: np.ndarray, origins: np.ndarray):
        """Inputs for origins (index of the last seen point). Returns seq (n, W, 5),
        extra (n, H + 4), centre (n,), scale (n,)."""
        W, H = self.window, self.H
        s = self.season or 288
        idx = origins[:, None] - W + 1 + np.arange(W)[None, :]
        seq_y = y[np.clip(idx, 0, None)]
        seq_y = np.where(idx < 0, y[0], seq_y)
        centre = seq_y[:, -12:].mean(axis=1)
        scale = np.mean(np.abs(np.diff(seq_y, axis=1)), axis=1)
        scale = np.maximum(scale, 1e-3 * np.maximum(np.abs(centre), 1e-6)) + 1e-9
        zn = np.clip((seq_y - centre[:, None]) / scale[:, None], -50, 50)
        tt = t[np.clip(idx, 0, None)] if t is not None else None
        tf = _time_feats(tt if tt is not None else np.zeros_like(seq_y))
        seq = np.concatenate([zn[..., None], tf], axis=-1).astype("float32")
        sidx = origins[:, None] + 1 + np.arange(H)[None, :] - s
        sy = y[np.clip(sidx, 0, None)]
        sy = np.where(sidx < 0, seq_y[:, -1:], sy)
        sz = np.clip((sy - centre[:, None]) / scale[:, None], -50, 50)
        tf0 = _time_feats(t[origins]) if t is not None else np.zeros((len(origins), 4))
        extra = np.concatenate([sz, tf0], axis=1).astype("float32")
        return seq, extra, centre, scale

    def _times(self, n: int) -> np.ndarray:
        return self.t0_ + np.arange(n) * self.step_

    # --- network -------------------------------------------------------------------------
    def _build(self):
        import torch
        from torch import nn

        H, nq, hid = self.H, len(self.tq), int(self.cfg["hidden"])

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.lstm = nn.LSTM(5, hid, batch_first=True)
                self.head = nn.Sequential(nn.Linear(hid + H + 4, 64), nn.ReLU(), nn.Linear(64, H * nq))

            def forward(self, seq, extra):
                _, (hn, _) = self.lstm(seq)
                out = self.head(torch.cat([hn[-1], extra], dim=1))
                return out.view(-1, nq, H)

        torch.manual_seed(int(self.cfg["seed"]))
        return Net()

    def fit_fleet(self, series: Sequence[tuple[np.ndarray, np.ndarray | None]], progress=None) -> "GlobalLSTM":
        """Train the shared network on (values, timestamps) of many series (history only): in
        this process, or with ``engine="ray"`` as torch DDP on ``workers`` Ray Train workers
        (``forecaster.engines.ray_train``; the same network and checkpoint)."""
        arrays = self.fleet_arrays(series)
        if self.cfg.get("engine", "local") == "ray":
            from forecaster.engines.ray_train import train_on_ray

            return train_on_ray(self, arrays, progress=progress)
        if self.cfg.get("engine", "local") != "local":
            raise ModelError(f"lstm.engine: {self.cfg['engine']!r} must be local or ray")
        import torch

        torch.set_num_threads(int(self.cfg["threads"]))
        self.net_, self.train_report_ = self.train_loop(arrays, progress=progress)
        return self

    def fleet_arrays(self, series: Sequence[tuple[np.ndarray, np.ndarray | None]]) -> tuple[np.ndarray, ...]:
        """Training and validation windows of the fleet: (seq, extra, target) for training, then
        the same for validation (the last ``val_fraction`` of each series' windows in time)."""
        rng = np.random.default_rng(int(self.cfg["seed"]))
        W, H = self.window, self.H
        tr, va = [], []
        for y_raw, ts in series:
            try:
                y = clean_history(y_raw)
            except ModelError:
                continue
            raw = np.asarray(y_raw, dtype="float64")
            fin = np.isfinite(raw)
            first = int(np.argmax(fin))
            t = None if ts is None else np.asarray(ts, dtype="float64")[first:]
            if not self.season:
                self.season = season_length(t)
            if t is None:
                t = 1.7e9 + np.arange(len(y)) * 300.0
            lo = W - 1
            hi = len(y) - H - 1
            if hi <= lo:
                continue
            origins = np.arange(lo, hi + 1, int(self.cfg["stride"]))
            cap = int(self.cfg["max_windows_per_series"])
            if len(origins) > cap:
                origins = np.sort(rng.choice(origins, cap, replace=False))
            n_val = max(1, int(len(origins) * float(self.cfg["val_fraction"])))
            seq, extra, c, s = self._windows(y, t, origins)
            tgt_idx = origins[:, None] + 1 + np.arange(H)[None, :]
            tgt = ((y[tgt_idx] - c[:, None]) / s[:, None]).clip(-50, 50).astype("float32")
            tr.append((seq[:-n_val], extra[:-n_val], tgt[:-n_val]))
            va.append((seq[-n_val:], extra[-n_val:], tgt[-n_val:]))
        if not tr or sum(len(a[0]) for a in tr) < 8:
            raise ModelError("lstm: not enough history in the fleet to train (need > window + horizon points)")
        return tuple(np.concatenate([p[i] for p in parts]) for parts in (tr, va) for i in range(3))

    def train_loop(self, arrays: tuple[np.ndarray, ...], progress=None, net=None, shard=None):
        """The epochs over ``fleet_arrays``: returns (network, report). Under DDP each of the
        ``shard.world`` ranks passes its wrapped ``net`` and takes its slice of every batch of
        ``batch`` windows; each rank's loss is scaled so that the averaged gradient is that of
        the whole batch (the same step as one process, up to float rounding), and ``shard.agree``
        makes every rank take rank 0's stopping decisions (``shard.total`` sums over the ranks)."""
        import torch

        Xs, Xe, Y, Vs, Ve, VY = (torch.from_numpy(a) for a in arrays)
        net = net if net is not None else self._build()
        inner = getattr(net, "module", net)  # the network itself under DDP
        opt = torch.optim.Adam(net.parameters(), lr=float(self.cfg["lr"]))
        qs = torch.tensor(self.tq).view(1, -1, 1)
        rank, world = (shard.rank, shard.world) if shard else (0, 1)

        def loss_fn(pred, y, n=None):  # pinball; mean over n windows (default: these)
            d = y.unsqueeze(1) - pred
            per = torch.maximum(qs * d, (qs - 1) * d)
            return per.mean() if n is None else per.sum() * world / (n * per[0].numel())

        best, best_state, bad, hist = math.inf, None, 0, []
        t_start = time.time()
        bs = int(self.cfg["batch"])
        g = torch.Generator().manual_seed(int(self.cfg["seed"]))
        for epoch in range(int(self.cfg["epochs"])):
            net.train()
            tot = _epoch(net, opt, loss_fn, (Xs, Xe, Y), torch.randperm(len(Y), generator=g), bs, rank, world)
            inner.eval()
            with torch.no_grad():
                vl = float(loss_fn(inner(Vs, Ve), VY))
            elapsed = time.time() - t_start
            if shard:  # the whole batch's train loss; rank 0's validation loss and clock
                tot, vl, elapsed = shard.total(tot), shard.agree(vl), shard.agree(elapsed)
            hist.append({"epoch": epoch + 1, "train_loss": tot / len(Y), "val_loss": vl})
            if progress:
                progress(hist[-1])
            if vl < best - 1e-4:
                best, bad = vl, 0
                best_state = {k: v.detach().clone() for k, v in inner.state_dict().items()}
            else:
                bad += 1
                if bad > int(self.cfg["patience"]):
                    break
            if elapsed > float(self.cfg["max_seconds"]):
                break
        if best_state is not None:
            inner.load_state_dict(best_state)
        inner.eval()
        report = {"windows": int(len(Y)), "val_windows": int(len(VY)), "epochs": hist,
                  "best_val_loss": best, "seconds": time.time() - t_start}
        return inner, report

    # --- per series ------------------------------------------------------------------------
    def fit(self, y, timestamps=None):
        raw = np.asarray(y, dtype="float64")
        ts = None if timestamps is None else np.asarray(timestamps, dtype="float64")
        fin = np.isfinite(raw)
        first = int(np.argmax(fin)) if fin.any() else 0
        if ts is not None and len(ts) == len(raw) and len(ts) >= 2:
            d = np.diff(ts)
            self.step_ = float(np.median(d[d > 0])) if (d > 0).any() else 300.0
            self.t0_ = float(ts[first])
        else:
            self.t0_ = 1.7e9
            self.step_ = 86400.0 / (self.season or 288)
        return super().fit(y, None if ts is None else ts[first:])

    def _fit(self, y: np.ndarray) -> None:
        if self.net_ is None:  # no fleet: train on this series alone (small)
            t = self._times(len(y))
            self.fit_fleet([(y, t)])

    def update(self, y, timestamps=None):
        super().update(y, timestamps)
        return self

    def _net_forecast(self, y: np.ndarray, t: np.ndarray, origins: np.ndarray) -> np.ndarray:
        import torch

        torch.set_num_threads(int(self.cfg["threads"]))
        seq, extra, c, s = self._windows(y, t, origins)
        with torch.no_grad():
            out = self.net_(torch.from_numpy(seq), torch.from_numpy(extra)).numpy().astype("float64")
        return out * s[:, None, None] + c[:, None, None]  # (n, nq, H)

    def _mean_from(self, y, h):
        n = len(y)
        last = self.last_ts_ if self.last_ts_ is not None else self.t0_ + (n - 1) * self.step_
        t = last - (n - 1 - np.arange(n)) * self.step_
        out = self._net_forecast(y, t, np.array([n - 1]))[0]
        self._own_q = {q: out[i] for i, q in enumerate(self.tq)}
        mean = out[self.tq.index(0.5)]
        return self._extend(mean, h)

    def _extend(self, v: np.ndarray, h: int) -> np.ndarray:
        if h <= len(v):
            return v[:h]
        return np.concatenate([v, np.full(h - len(v), v[-1])])

    def _rolling_means(self, y, origins, h):
        t = self._times(len(y))
        out = self._net_forecast(y, t, origins)[:, self.tq.index(0.5), :]
        if h > out.shape[1]:
            out = np.concatenate([out, np.repeat(out[:, -1:], h - out.shape[1], axis=1)], axis=1)
        return out[:, :h]

    def _quantiles(self, mean, h, quantiles):
        # before calibration, the network's own quantile heads give the spread
        if not self.calibrated_ and getattr(self, "_own_q", None):
            from core.store import quantile_key

            med = self._extend(self._own_q[0.5], h)
            self.offsets_ = {quantile_key(q): self._extend(v, h) - med for q, v in self._own_q.items()}
        return super()._quantiles(mean, h, quantiles)

    # --- pickling (worker processes get the trained network as a state_dict) -------------------
    def __getstate__(self):
        state = dict(self.__dict__)
        net = state.pop("net_", None)
        # numpy, not tensors: multiprocessing would share tensors through file descriptors
        state["_net_state"] = None if net is None else {k: v.detach().cpu().numpy().copy() for k, v in net.state_dict().items()}
        state["params"] = {k: v for k, v in self.params.items() if k != "_net"}
        return state

    def __setstate__(self, state):
        net_state = state.pop("_net_state", None)
        self.__dict__.update(state)
        self.net_ = None
        if net_state is not None:
            import torch

            net = self._build()
            net.load_state_dict({k: torch.from_numpy(v) for k, v in net_state.items()})
            net.eval()
            self.net_ = net

    # --- checkpoint ------------------------------------------------------------------------
    # Tensors and plain data only, read back with torch.load(weights_only=True): unpickling
    # arbitrary objects would let whoever can write the checkpoint storage run code here.
    def save(self, path) -> None:
        import torch

        if self.net_ is None:
            raise ModelError("lstm: nothing to save; train it first (fit_fleet)")
        torch.save(
            {
                "version": CHECKPOINT_VERSION,
                "state_dict": self.net_.state_dict(),
                "config": _plain({**{k: v for k, v in self.cfg.items() if k not in _WHERE}, "season": self.season}),
                "scaler": {"kind": "recent_window", "centre_points": 12, "scale": "mean_abs_diff", "clip": 50},
                "train_report": _plain(self.train_report_),
            },
            path,
        )

    @classmethod
    def load(cls, path) -> "GlobalLSTM":
        import pickle

        import torch

        try:
            ck = torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as exc:
            why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelError(
                f"lstm checkpoint {path} holds more than tensors and plain data, so it is not loaded "
                f"(torch.load weights_only=True refused it: {why}); unpickling it could run code. "
                "Retrain to write a new checkpoint (GlobalLSTM.save writes only a state_dict and plain config)"
            ) from None
        if not isinstance(ck, dict):
            raise ModelError(f"lstm checkpoint {path} is a {type(ck).__name__}, not a GlobalLSTM.save checkpoint (a dict)")
        if ck.get("version") != CHECKPOINT_VERSION:
            raise ModelError(f"lstm checkpoint {path} has version {ck.get('version')}; this build reads {CHECKPOINT_VERSION}")
        cfg = dict(ck["config"])
        season = cfg.pop("season", 0)
        m = cls(**cfg, season=season)
        net = m._build()
        net.load_state_dict(ck["state_dict"])
        net.eval()
        m.net_ = net
        m.train_report_ = ck.get("train_report", {})
        return m
