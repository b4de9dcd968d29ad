"""The output head of a Hugging Face causal LM and its relation to the input embedding."""

from __future__ import annotations

import torch


def is_tied(model: torch.nn.Module) -> bool:
    """Whether ``model``'s output head is its input embedding's tensor (``tie_word_embeddings``).

    ``model`` is a Hugging Face causal LM (``get_input_embeddings`` / ``get_output_embeddings``); a
    model without an output head is untied. Tying is tensor identity, not equal values: a copy of the
    embedding in the head is untied (it trains apart).
    """
    head = model.get_output_embeddings()
    return head is not None and head.weight is model.get_input_embeddings().weight
