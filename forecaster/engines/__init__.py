"""Engines behind ``forecaster.engine`` (``local``, ``ray``)."""
