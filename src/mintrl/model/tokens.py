"""Tokenizer helpers shared by prompts, judges, interventions, distillation and the chat server."""

from __future__ import annotations


def chat_ids(tokenizer, messages: list[dict], **template_kwargs) -> list[int]:
    """Token ids of ``messages`` under the tokenizer's chat template, with the generation prompt.

    ``apply_chat_template(tokenize=True)`` returns a list or a ``BatchEncoding`` depending on the
    ``transformers`` version; both give a plain ``list[int]`` here.
    """
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **template_kwargs)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def same_vocabulary(a, b) -> bool:
    """True when two tokenizers map every token string to the same id (token ids can be shared)."""
    return a is b or (len(a) == len(b) and a.get_vocab() == b.get_vocab())
