"""The rules API app the rules unit tests build: one helper so every test wires it the same way."""

from __future__ import annotations

from fastapi import FastAPI

from app.api.access import Gate
from app.api.errors import install_error_handlers
from app.api.options import ApiOptions
from app.api.routes import admin, cameras, events
from app.core.roles import Keyring
from app.core.sources import SourceBook
from tests.support.state import install_state


def make_app(rules, keys=()) -> FastAPI:
    app = FastAPI()
    install_state(app, rules=rules, options=ApiOptions(), gate=Gate.of(Keyring.parse(keys)),
                  sources=SourceBook())  # GET /cameras shows each camera's stream (none here)
    install_error_handlers(app)
    for module in (events, cameras, admin):  # what the rules' events, cameras and admin routes serve
        app.include_router(module.router)
    return app
