"""`grade --play`: the playground's server, a Starlette app over a `Playground` (grader.host.play.session), on
127.0.0.1 at a free port, until Ctrl-C.

The page (static/) is one self-contained page that asks two JSON endpoints: /api/analyse (next token, inside,
where) and /api/generate. The learner's code runs in the Playground's own process; each call here waits for it in a
worker thread, one call at a time, so a slow answer never holds up the page or another request's reply.
"""

from __future__ import annotations

import json
import math
import socket
import sys
import threading
import webbrowser
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

if TYPE_CHECKING:
    from grader.host.play.session import Playground

HOST = "127.0.0.1"  # never another interface: the page runs the learner's code for whoever reaches it
STATIC = Path(__file__).parent / "static"
MAX_TEXT = 2000  # characters: GPT-2's context is 1024 tokens
MAX_NEW_TOKENS = 200
# What /api/generate takes besides the text: each option's type, and the bounds a number must lie within.
GENERATE_OPTIONS: dict[str, tuple[type, float | None, float | None]] = {
    "max_new_tokens": (int, 1, MAX_NEW_TOKENS),
    "temperature": (float, 0.0, 100.0),
    "top_k": (int, 1, 50257),
    "top_p": (float, 0.0, 1.0),
    "frequency_penalty": (float, -10.0, 10.0),
    "seed": (int, 0, 2**31 - 1),
    "greedy": (bool, None, None),
}
OPTIONAL = {"top_k", "top_p"}  # null: that filter is off


class BadRequest(ValueError):
    """A request the page would not send: the message says what is wrong with it."""


def create_app(playground: Playground) -> Starlette:
    """The playground's routes over `playground`: the page, its files and the two endpoints."""
    one_at_a_time = threading.Lock()  # the learner's process answers one question at a time

    async def answered(call, *args, **kwargs) -> JSONResponse:
        def locked():
            with one_at_a_time:
                return call(*args, **kwargs)

        try:
            return JSONResponse(json_safe(await run_in_threadpool(locked)))
        except Exception as error:  # the grader's own failure: said on the page, which keeps working
            return failure(f"the playground failed: {type(error).__name__}: {error}", 500)

    async def analyse(request: Request) -> JSONResponse:
        try:
            text = text_of(await body_of(request))
        except BadRequest as error:
            return failure(str(error), 400)
        return await answered(playground.analyse, text)

    async def generate(request: Request) -> JSONResponse:
        try:
            body = await body_of(request)
            text, options = text_of(body), generate_options(body)
        except BadRequest as error:
            return failure(str(error), 400)
        return await answered(playground.generate, text, **options)

    async def page(request: Request) -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    routes = [
        Route("/", page),
        Route("/api/analyse", analyse, methods=["POST"]),
        Route("/api/generate", generate, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    return Starlette(routes=routes)


def json_safe(value: Any) -> Any:
    """`value` with each NaN or infinity as its word ("nan", "inf", "-inf"): JSON has no such number, and a learner's
    model that gives one is worth showing, not a failure of the page."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return value


def failure(message: str, status: int) -> JSONResponse:
    """An answer the page shows in its error banner, as it shows the learner's own error (no file, no line)."""
    return JSONResponse({"error": {"file": None, "line": None, "message": message}}, status_code=status)


async def body_of(request: Request) -> dict:
    try:
        body = json.loads(await request.body())
    except ValueError as error:
        raise BadRequest(f"the request is not JSON: {error}") from None
    if not isinstance(body, dict):
        raise BadRequest("the request is not a JSON object")
    return body


def text_of(body: dict) -> str:
    text = body.get("text")
    if not isinstance(text, str) or not text.strip():
        raise BadRequest("type some text first")
    if len(text) > MAX_TEXT:
        raise BadRequest(f"the text is {len(text)} characters long; the playground reads up to {MAX_TEXT}")
    return text


def generate_options(body: dict) -> dict[str, Any]:
    """The options of /api/generate the body gives, checked: the Playground's defaults for those it leaves out."""
    options = {}
    for name, (kind, low, high) in GENERATE_OPTIONS.items():
        if name not in body or (body[name] is None and name in OPTIONAL):
            continue
        options[name] = option_value(name, body[name], kind, low, high)
    return options


def option_value(name: str, value: Any, kind: type, low: float | None, high: float | None) -> Any:
    if kind is bool:
        if not isinstance(value, bool):
            raise BadRequest(f"{name} is true or false, not {value!r}")
        return value
    whole = isinstance(value, int) and not isinstance(value, bool)
    if not (whole or (kind is float and isinstance(value, float))):
        raise BadRequest(f"{name} is {'a whole number' if kind is int else 'a number'}, not {value!r}")
    if not low <= value <= high:
        raise BadRequest(f"{name} is between {low:g} and {high:g}, not {value!r}")
    return kind(value)


def listening_socket() -> socket.socket:
    """A socket bound to a free port of 127.0.0.1, listening: the URL is known before the server starts."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((HOST, 0))
    sock.listen(64)
    return sock


def url_of(sock: socket.socket) -> str:
    return f"http://{HOST}:{sock.getsockname()[1]}/"


def server_for(playground: Playground) -> uvicorn.Server:
    # A reply in progress at Ctrl-C gets a moment to finish; the Playground's own timeout ends a longer one.
    config = uvicorn.Config(create_app(playground), log_level="warning", timeout_graceful_shutdown=2)
    return uvicorn.Server(config)


def serve(playground: Playground, browser: bool) -> int:
    """Serve the page over `playground` until Ctrl-C (or SIGTERM); opened in the browser where asked and found."""
    sock = listening_socket()
    url = url_of(sock)
    print(f"grade: the playground is at {url} (Ctrl-C stops it)", flush=True)
    if browser:  # a thread: a terminal browser (lynx) would hold this one until it quits
        threading.Thread(target=opened, args=(url,), daemon=True).start()
    try:
        server_for(playground).run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn stops on SIGINT, then raises it again once stopped
        pass
    finally:
        sock.close()
    print("grade: the playground stopped", flush=True)
    return 0


def opened(url: str) -> None:
    if not webbrowser.open(url):
        print(f"grade: no browser found here: open {url} yourself", flush=True)


def play(package: Path, reference: str, timeout: float, browser: bool) -> int:
    """`grade --play`: the learner's package in a Playground, served until Ctrl-C, then closed."""
    from grader.host.play.session import Playground
    from grader.host.refcache import ReferenceUnavailable

    print(f"grade: loading {package} with the reference's weights for the playground", file=sys.stderr, flush=True)
    try:
        playground = Playground.start(package, reference, timeout)
    except ReferenceUnavailable as error:
        print(f"grade: {error} (--reference random plays offline)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("grade: interrupted", file=sys.stderr)
        return 130
    with playground:
        return serve(playground, browser)
