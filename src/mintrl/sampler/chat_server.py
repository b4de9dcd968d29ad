"""``mintrl-serve``: a minimal OpenAI-compatible chat server over a Hugging Face model.

Serves ``POST /v1/chat/completions`` (``messages``, ``max_tokens``, ``temperature``) and
``GET /v1/models`` on loopback by default, one generation at a time. It lets any model of this
project (the embedded default included) act as a black-box judge through ``judge=api``, and it is
what the tests run the API judge against. Not a production server: use vLLM's for real loads.

    mintrl-serve --model embedded --port 8000
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from mintrl.model.tokens import chat_ids
from mintrl.sampler.hf import HFSampler


class ChatServer:
    """Background HTTP server (see module docstring).

    Args:
        model, tokenizer: a causal LM and its tokenizer (chat template used for ``messages``).
        host, port: bind address (port 0: any free port).
        model_name: the name reported and accepted in requests.
        max_tokens_cap: upper bound on ``max_tokens`` per request (tokens).
    """

    def __init__(
        self,
        model,
        tokenizer,
        host: str = "127.0.0.1",
        port: int = 0,
        model_name: str = "mintrl-local",
        max_tokens_cap: int = 1024,
    ):
        self.sampler = HFSampler(model, tokenizer)
        self.tokenizer, self.model_name, self.max_tokens_cap = tokenizer, model_name, max_tokens_cap
        self._generate_lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path.rstrip("/") == "/v1/models":
                    return self._send(200, {"object": "list", "data": [{"id": server.model_name, "object": "model"}]})
                self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self):
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                try:
                    request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                    body = server.complete(request)
                except (ValueError, KeyError, TypeError) as err:
                    return self._send(400, {"error": {"message": str(err), "type": "invalid_request_error"}})
                self._send(200, body)

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """``http://host:port/v1``."""
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def complete(self, request: dict) -> dict:
        """One chat completion in OpenAI's response format.

        Raises:
            ValueError: no ``messages``, or a non-positive ``max_tokens`` / ``temperature``.
        """
        messages = request["messages"]
        if not isinstance(messages, list) or not messages:
            raise ValueError("messages must be a non-empty list")
        max_tokens = min(int(request.get("max_tokens") or 256), self.max_tokens_cap)
        temperature = float(request.get("temperature", 1.0))
        if max_tokens <= 0:
            raise ValueError("max_tokens must be positive")
        ids = chat_ids(self.tokenizer, messages)
        with self._generate_lock:
            if temperature <= 0:  # greedy: a very low temperature on the same sampler
                temperature = 1e-4
            gen = self.sampler.generate([ids], max_tokens, temperature)
        out = gen.token_ids[0].tolist()
        text = self.tokenizer.decode(out, skip_special_tokens=True)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop" if gen.finished[0] else "length",
                }
            ],
            "usage": {"prompt_tokens": len(ids), "completion_tokens": len(out), "total_tokens": len(ids) + len(out)},
        }

    def start(self) -> "ChatServer":
        """Serve in a daemon thread; returns self."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, close the socket and the sampler (:meth:`mintrl.sampler.base.Sampler.close`)."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self.sampler.close()

    def __enter__(self) -> "ChatServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
