"""Typed application state (``web.AppKey``): what handlers may read from ``request.app``."""

from __future__ import annotations

from aiohttp import web

from ..config import Settings
from ..jsontypes import JSONObject
from ..runtime.scheduler import Scheduler
from ..store.model_store import ModelStore
from .executors import Executors
from .lifecycle import DaemonInfo, Shutdown
from .metrics import Metrics
from .responses.background import BackgroundRuns
from .responses.store import ResponseStore
from .service import Service

SETTINGS = web.AppKey("settings", Settings)
SCHEDULER = web.AppKey("scheduler", Scheduler)
SERVICE = web.AppKey("service", Service)
RESPONSES = web.AppKey("responses", ResponseStore)  # /v1/responses kept for previous_response_id
BACKGROUND = web.AppKey("background_responses", BackgroundRuns)  # /v1/responses with "background": true
METRICS = web.AppKey("metrics", Metrics)
STORE = web.AppKey("store", ModelStore)  # tests may pass a stand-in with the methods the routes call
STARTED_AT = web.AppKey("started_at", float)
EXECUTORS = web.AppKey("executors", Executors)
DAEMON = web.AppKey("daemon", DaemonInfo)  # pid, start time, log file (GET /api/status)
SHUTDOWN = web.AppKey("shutdown", Shutdown)  # set by signals or POST /api/shutdown; serve() waits on it
# Pulls under way in this daemon: model name -> latest progress report (shown by /api/ps).
PULLS: web.AppKey[dict[str, JSONObject]] = web.AppKey("pulls")
