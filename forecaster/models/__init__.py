"""Forecasting models behind one protocol (see ``forecaster.models.base``).

    from forecaster.models import get_model, available_models
    m = get_model("ar").fit(y, timestamps)
    p = m.predict(12, quantiles=(0.5, 0.9))    # p.mean, p.quantiles["p90"]
"""

from forecaster.models.base import Model, ModelError, Prediction, clean_history
from forecaster.models.registry import available_models, get_model, register_model, unregister_model

__all__ = [
    "Model",
    "ModelError",
    "Prediction",
    "available_models",
    "clean_history",
    "get_model",
    "register_model",
    "unregister_model",
]
