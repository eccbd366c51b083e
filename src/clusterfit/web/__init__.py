"""The web edge of clusterfit: an HTTP API over ``clusterfit.api`` and one page (``clusterfit serve``).

Needs the ``web`` extra (FastAPI, uvicorn): ``pip install 'clusterfit[web]'``."""

from __future__ import annotations

from .app import create_app

__all__ = ["create_app"]
