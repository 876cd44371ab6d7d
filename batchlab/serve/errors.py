"""Every error in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``.

Types as OpenAI's API uses them: ``invalid_request_error`` for the client's 4xx,
``authentication_error`` (401), ``not_found_error`` (404 routes; a model that is not
served is an ``invalid_request_error`` with code ``model_not_found``, as OpenAI answers),
``server_error`` (5xx), ``service_unavailable`` (503 while shutting down).
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException


class APIError(Exception):
    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = (
            status, message, type, param, code)

    def body(self) -> dict:
        return error_body(self.message, type=self.type, param=self.param, code=self.code)


def error_body(message: str, *, type: str = "invalid_request_error", param: str | None = None,
               code: str | int | None = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def error_response(err: APIError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if err.status == 401 else None
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


def validation_error(errors: list[dict]) -> APIError:
    """A pydantic error list as one 400 naming the first offending field."""
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ()) if p not in ("body",)]
    param = ".".join(loc) or None
    if first.get("type") == "extra_forbidden":
        message = f"Unrecognized request argument supplied: {param}"
    else:
        message = f"{param}: {first.get('msg')}" if param else str(first.get("msg"))
    more = len(errors) - 1
    if more:
        message += f" (and {more} more problem{'s' if more > 1 else ''})"
    return APIError(400, message, param=param, code="invalid_value")


_PHRASES = {404: "not_found_error", 405: "invalid_request_error", 413: "invalid_request_error"}


def install(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api(_: Request, err: APIError):
        return error_response(err)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, err: RequestValidationError):
        return error_response(validation_error(list(err.errors())))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, err: StarletteHTTPException):
        message = {404: f"no route {request.method} {request.url.path}",
                   405: f"{request.method} is not allowed on {request.url.path}"}.get(
                       err.status_code, str(err.detail))
        body = error_body(message, type=_PHRASES.get(err.status_code, "invalid_request_error"),
                          code=err.status_code)
        return JSONResponse(body, status_code=err.status_code, headers=err.headers)

    @app.exception_handler(Exception)
    async def _bug(_: Request, err: Exception):
        return JSONResponse(error_body(f"internal error: {type(err).__name__}: {err}",
                                       type="server_error"), status_code=500)
