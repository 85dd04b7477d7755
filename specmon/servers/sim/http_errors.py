"""SGLang's answers to a request it rejects: the tokenizer manager's error body, FastAPI's
validation error, and the JSON body read that yields the latter."""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import JSONResponse


def error(message: str, status: int = 400) -> JSONResponse:
    # SGLang's shape for a request its tokenizer manager rejects (ValueError -> 400).
    return JSONResponse({"error": {"message": message}}, status_code=status)


def validation_error(errors: list, path: str, where: str) -> JSONResponse:
    # SGLang's shape for a body FastAPI/pydantic rejects: openai-style error with the pydantic list.
    n = len(errors)
    lines = "\n".join(f"  {e!r}" for e in errors)
    msg = (f"{n} validation error{'s' if n != 1 else ''}:\n{lines}\n\n  File \"sglang/srt/entrypoints/http_server.py\", "
           f"in {where}\n    POST {path} {errors!r}")
    return JSONResponse({"object": "error", "message": msg, "type": "Bad Request", "param": None, "code": 400},
                        status_code=400)


async def read_json(request: Request, where: str):
    """The request's JSON object and None, or None and the validation error SGLang answers."""
    raw = await request.body()
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        return None, validation_error([{"type": "json_invalid", "loc": ("body", 0), "msg": "JSON decode error",
                                        "input": {}, "ctx": {"error": getattr(e, "msg", str(e))}}],
                                      request.url.path, where)
    if not isinstance(body, dict):
        return None, validation_error([{"type": "dataclass_type", "loc": ("body",),
                                        "msg": "Input should be a dictionary or an instance of GenerateReqInput",
                                        "input": body, "ctx": {"class_name": "GenerateReqInput"}}],
                                      request.url.path, where)
    return body, None
