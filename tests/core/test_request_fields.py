"""SamplingParams is the table of request fields: its fields (written out, for readers and type
checkers), defaults and range checks are minisgl.core.request_fields': a field declared there
exists, defaults and is checked everywhere."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from minisgl.core.params import SamplingParams
from minisgl.core.request_fields import REQUEST_FIELDS, TOKEN_ID_FIELDS, Range


def test_sampling_params_has_the_tables_fields_in_order_with_its_types_and_defaults():
    """The fields are written out in minisgl/core/params.py; a new table entry needs its line there."""
    fields = dataclasses.fields(SamplingParams)
    assert [f.name for f in fields] == [f.name for f in REQUEST_FIELDS]
    hints = typing.get_type_hints(SamplingParams)
    assert [(f.name, hints[f.name]) for f in fields] == [(f.name, f.type) for f in REQUEST_FIELDS]
    assert [f.default for f in fields] == [f.default for f in REQUEST_FIELDS]
    assert SamplingParams() == SamplingParams(**{f.name: f.default for f in REQUEST_FIELDS})


def _outside(r: Range) -> float:
    """A value just outside the range (below it where it has a lower bound)."""
    if r.ge is not None:
        return r.ge - 1
    if r.gt is not None:
        return r.gt
    return (r.le if r.le is not None else r.lt) + 1


@pytest.mark.parametrize("field", [f for f in REQUEST_FIELDS if f.valid is not None], ids=lambda f: f.name)
def test_a_value_outside_a_fields_range_is_refused_naming_the_field_and_the_range(field):
    bad = _outside(field.valid)
    with pytest.raises(ValueError) as e:
        SamplingParams(**{field.name: bad})
    assert str(e.value) == f"{field.name} must be {field.valid.describe()}, got {bad}"


@pytest.mark.parametrize("r, text", [(Range(ge=0), ">= 0"), (Range(gt=0), "> 0"), (Range(gt=0, le=1), "in (0, 1]"),
                                     (Range(ge=-2, le=2), "in [-2, 2]"), (Range(le=0.5), "<= 0.5"),
                                     (Range(ge=0, lt=1), "in [0, 1)")])
def test_a_range_states_itself_as_error_messages_do(r, text):
    assert r.describe() == text


def test_sequences_arriving_as_lists_are_stored_as_tuples_and_stay_hashable():
    p = SamplingParams(stop_token_ids=[3, 4], stop=["x"], logit_bias=[[5, 1]], constraint=["regex", "a+"])
    assert (p.stop_token_ids, p.stop, p.logit_bias, p.constraint) == ((3, 4), ("x",), ((5, 1.0),), ("regex", "a+"))
    hash(p)


def test_every_token_id_a_request_carries_is_named_with_its_field():
    p = SamplingParams(stop_token_ids=(7,), logit_bias={9: 1.0})
    carried = {name: list(ids) for name, ids in p.token_ids()}
    assert carried == {"logit_bias": [9], **{f.name: list(getattr(p, f.name)) for f in TOKEN_ID_FIELDS}}
    assert carried["stop_token_ids"] == [7]
