"""pytrain.text.hub_inputs: each input name Hugging Face exports use is fed what transformers feeds (positions from
the attention mask as transformers' generation computes them, zero token types, an empty past with the heads and
head size of the shape or config.json, cache positions), and any other input is refused naming it."""
from __future__ import annotations

import numpy as np
import pytest

from pytrain.base.dtypes import FLOAT, FLOAT16, INT64
from pytrain.errors import DataError
from pytrain.text.hub_inputs import past_dims, plan, positions, read_config

IDS = ("input_ids", INT64, ["batch", "seq"])
MASK = ("attention_mask", INT64, ["batch", "seq"])


def _past(layer, heads=2, size=8, et=FLOAT):
    return [("past_key_values.%d.%s" % (layer, kv), et, ["batch", heads, "past", size]) for kv in ("key", "value")]


def test_positions_are_transformers_cumsum_of_the_mask_minus_one_masked_to_one():
    torch = pytest.importorskip("torch")
    mask = np.array([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [1, 1, 0, 1, 1]])
    t = torch.from_numpy(mask)
    want = t.long().cumsum(-1) - 1
    want.masked_fill_(t == 0, 1)   # transformers' prepare_inputs_for_generation (and Optimum's ORTModel)
    np.testing.assert_array_equal(positions(mask), want.numpy())
    np.testing.assert_array_equal(positions(np.ones((2, 4))), [[0, 1, 2, 3]] * 2)


def test_a_with_past_export_is_fed_ids_mask_positions_and_an_empty_past_in_its_order():
    p = plan([IDS] + _past(0) + _past(1) + [MASK, ("position_ids", INT64, ["batch", "seq"])])
    x = np.stack([np.arange(12).reshape(2, 6), np.array([[0, 1, 1, 1, 1, 1], [1] * 6])], axis=1)
    feeds = p.feeds(x)
    assert [a.shape for a in feeds] == [(2, 6)] + [(2, 2, 0, 8)] * 4 + [(2, 6), (2, 6)]
    assert feeds[1].dtype == np.float32 and feeds[0].dtype == np.int64
    np.testing.assert_array_equal(feeds[-1], [[1, 0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 5]])
    assert p.ids == "input_ids" and p.masked and len(p.past) == 4
    # labels follow for a classifier, not for a causal LM
    assert len(p.feeder(True)(x, np.array([0, 1]))) == 8 and len(p.feeder(False)(x, np.array([0, 1]))) == 7


def test_token_types_are_zeros_and_cache_positions_count_from_the_empty_past():
    p = plan([IDS, MASK, ("token_type_ids", INT64, None), ("cache_position", INT64, ["seq"])])
    a = p.arrays(np.full((2, 5), 7))
    np.testing.assert_array_equal(a["token_type_ids"], np.zeros((2, 5)))
    np.testing.assert_array_equal(a["cache_position"], np.arange(5))
    np.testing.assert_array_equal(a["attention_mask"], np.ones((2, 5)))


def test_the_past_heads_and_size_come_from_config_json_when_the_shape_leaves_them_open():
    open_past = [("past_key_values.0.key", FLOAT16, ["b", "h", "p", "d"]), ("past_key_values.0.value", FLOAT16, None)]
    cfg = {"num_attention_heads": 8, "num_key_value_heads": 2, "hidden_size": 64}
    p = plan([IDS] + open_past, cfg)
    a = p.arrays(np.zeros((3, 4), dtype=np.int64))
    assert a["past_key_values.0.key"].shape == (3, 2, 0, 8) and a["past_key_values.0.key"].dtype == np.float16
    assert past_dims({"n_head": 4, "n_embd": 32}) == (4, 8)                           # GPT-2
    assert past_dims({"num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16}) == (1, 16)   # Gemma
    assert past_dims({"text_config": {"num_attention_heads": 2, "hidden_size": 8}}) == (2, 4)
    # what a run keeps feeds the same without the config
    again = plan(p.specs())
    assert again.arrays(np.zeros((3, 4), dtype=np.int64))["past_key_values.0.value"].shape == (3, 2, 0, 8)


@pytest.mark.parametrize("inputs,config,message", [
    ([IDS, ("use_cache_branch", 9, [1])], None, "'use_cache_branch'.*merged decoder"),
    ([IDS, ("encoder_hidden_states", FLOAT, None)], None, "'encoder_hidden_states'"),
    ([IDS, ("pixel_mask", INT64, None)], None, "also takes 'pixel_mask' \\(int64\\)"),
    ([("a", INT64, None), ("b", INT64, None)], None, "several integer inputs \\(a, b\\)"),
    ([IDS, ("visual_features", FLOAT, None)], None, "also takes 'visual_features'"),
    ([IDS] + [("past_key_values.0.key", FLOAT, ["b", "h", "p", "d"])], None, "past_key_values.0.key.*config.json"),
    ([IDS] + _past(0, heads=4), {"num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 32},
     "has 4 heads but its config.json says 2"),
    ([IDS, ("past_key_values.0.key", FLOAT, ["b", "p", "d"])], None, "3 axes"),
    ([IDS, ("position_ids", FLOAT, None)], None, "'position_ids' is float"),
    ([("x", FLOAT, None)], None, "no integer input for token ids"),
    ([("pixel_values", FLOAT, None), ("pixel_mask", INT64, None)], None, "'pixel_mask' \\(int64\\) beside pixel_values"),
])
def test_what_no_flow_can_fill_is_refused_by_name(inputs, config, message):
    with pytest.raises(DataError, match=message):
        plan(inputs, config, "the model")


def test_config_json_is_read_from_text_bytes_or_a_dict_and_refused_when_not_an_object():
    assert read_config(b'{"n_head": 2}') == {"n_head": 2} == read_config('{"n_head": 2}') == read_config({"n_head": 2})
    assert read_config(None) is None
    for bad, message in (("[1]", "not an object"), ("{", "not JSON")):
        with pytest.raises(DataError, match=message):
            read_config(bad)
