"""``mintrl-serve``: any model of this project behind a minimal OpenAI-compatible chat endpoint
(:class:`mintrl.sampler.chat_server.ChatServer`), e.g. for ``judge=api`` against a local model."""

from __future__ import annotations

import argparse
from typing import Sequence

from mintrl.sampler.chat_server import ChatServer


def main(argv: Sequence[str] | None = None) -> None:
    """Serve ``--model`` (``embedded`` or an HF folder / hub id) until interrupted."""
    from mintrl.model import embedded_smollm2, load_policy

    parser = argparse.ArgumentParser(prog="mintrl-serve", description=__doc__)
    parser.add_argument("--model", default="embedded", help="embedded | HF folder | hub id")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--name", default="mintrl-local", help="the model name the endpoint reports")
    args = parser.parse_args(argv)
    loaded = embedded_smollm2() if args.model == "embedded" else load_policy(args.model)
    server = ChatServer(loaded.model.eval(), loaded.tokenizer, args.host, args.port, args.name)
    print(f"serving {args.model} as {args.name!r} at {server.base_url}", flush=True)
    try:
        server.httpd.serve_forever()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
