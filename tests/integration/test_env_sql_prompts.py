"""env=sql: the SQL prompt source with the embedded model's tokenizer (prompt lengths, items)."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from mintrl.data.base import InvalidRow, RowFilter
from mintrl.env.sql.protocol import result_observation
from mintrl.env.sql.source import SqlTasks
from mintrl.env.sql.tasks import example_messages, render_instruction
from mintrl.model.loading import embedded_smollm2_folder


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    """The embedded model's tokenizer alone (the model is not needed here)."""
    return AutoTokenizer.from_pretrained(str(embedded_smollm2_folder()))


def test_easy_items_fit_the_embedded_model(smollm2_tokenizer):
    source = SqlTasks(train_size=100, val_size=20, max_prompt_tokens=512, example=False)  # the sql_easy knobs
    items = source.build("train", smollm2_tokenizer)
    assert len(items) == 100 and [i.index for i in items] == list(range(100))
    for item in items:
        assert item.task == "sql" and item.question == render_instruction(item.entry)
        assert item.reference == item.entry["reference_action"] == f"```sql\n{item.entry['query']}\n```"
        assert len(item.prompt_ids) <= 512
    assert max(len(i.prompt_ids) for i in items) < 200  # 124..158 tokens measured at the easy level


def test_the_worked_example_comes_first_as_chat_turns(smollm2_tokenizer):
    """`example=True` (the data configs' default): the prompt is the example episode's four chat
    messages, then the task's user message; the item's question stays the task alone."""
    tok = smollm2_tokenizer
    plain = SqlTasks(train_size=5, val_size=2, example=False).build("val", tok)
    shown = SqlTasks(train_size=5, val_size=2, example=True).build("val", tok)
    messages = example_messages()
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert messages[1]["content"] == "```sql\nSELECT age FROM pets WHERE name = 'Bo';\n```"
    assert messages[2]["content"] == result_observation("age\n7") and messages[3]["content"] == "<answer>7</answer>"
    for a, b in zip(plain, shown):
        assert a.question == b.question == render_instruction(b.entry)
        whole = tok.apply_chat_template(
            [*messages, {"role": "user", "content": b.question}], tokenize=False, add_generation_prompt=True
        )
        assert b.prompt_ids == tok(whole, add_special_tokens=False)["input_ids"]
        assert 100 < len(b.prompt_ids) - len(a.prompt_ids) < 200  # the example's tokens (system prompt once)


def test_an_over_long_prompt_names_the_task(smollm2_tokenizer):
    source = SqlTasks(train_size=3, val_size=2, min_rows=20, max_rows=20, max_prompt_tokens=64)
    with pytest.raises(
        InvalidRow,
        match=r"sql val task 0 \(generated\): field 'question': prompt has \d+ tokens > max_prompt_tokens=64",
    ):
        source.build("val", smollm2_tokenizer)
    skip = RowFilter(skip=True)
    assert source.build("val", smollm2_tokenizer, skip) == [] and len(skip.skipped) == 2
