"""One explicit registry of models. Entries are import paths so that heavy libraries (torch,
prophet, statsmodels) load only when their model is asked for."""

from __future__ import annotations

import importlib
from typing import Any, Callable

from forecaster.models.base import Model, ModelError

# name -> ("module:Class", default params)
_REGISTRY: dict[str, tuple[str, dict[str, Any]]] = {
    "persistence": ("forecaster.models.naive:Persistence", {}),
    "seasonal_naive": ("forecaster.models.naive:SeasonalNaive", {}),
    "moving_average": ("forecaster.models.naive:MovingAverage", {"window": 12}),
    "moving_average_3": ("forecaster.models.naive:MovingAverage", {"window": 3}),
    "moving_average_6": ("forecaster.models.naive:MovingAverage", {"window": 6}),
    "moving_average_36": ("forecaster.models.naive:MovingAverage", {"window": 36}),
    "ar": ("forecaster.models.ar:AR", {}),
    "ar_log": ("forecaster.models.ar:AR", {"transform": "log"}),
    "ar_log_6": ("forecaster.models.ar:AR", {"transform": "log", "lags": 6}),
    "ar_log_24": ("forecaster.models.ar:AR", {"transform": "log", "lags": 24}),
    "ar_log_noseason": ("forecaster.models.ar:AR", {"transform": "log", "seasonal": False}),
    "ar_ma": ("forecaster.models.combo:Combination", {"members": ("ar", "moving_average")}),
    "ets": ("forecaster.models.ets:ETS", {}),
    "prophet": ("forecaster.models.prophet:ProphetModel", {}),
    "lstm": ("forecaster.models.lstm:GlobalLSTM", {}),
}


def register_model(name: str, target: str | Callable[..., Model], **defaults: Any) -> None:
    """Add a model (``"module:Class"`` or a factory) under ``name``; used by tests/plug-ins."""
    _REGISTRY[name] = (target, dict(defaults))  # type: ignore[assignment]


def unregister_model(name: str) -> None:
    _REGISTRY.pop(name, None)


def available_models() -> list[str]:
    return sorted(_REGISTRY)


def _resolve(target):
    if callable(target):
        return target
    mod, _, cls = target.partition(":")
    try:
        return getattr(importlib.import_module(mod), cls)
    except ImportError as exc:
        raise ModelError(f"model class {target} cannot be imported: {exc}") from exc


def get_model(name: str, **params: Any) -> Model:
    """A configured, unfitted model. Unknown names raise a ModelError listing the known ones."""
    if name not in _REGISTRY:
        raise ModelError(f"unknown model {name!r}; known: {available_models()}")
    target, defaults = _REGISTRY[name]
    merged = {**defaults, **params}
    model = _resolve(target)(**merged)
    model.name = name  # aliases (ar_log) keep their own name in reports
    return model
