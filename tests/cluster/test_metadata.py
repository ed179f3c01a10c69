"""Topic-name validation, as Kafka's ``Topic.validate``."""

from __future__ import annotations

import pytest

from dmq.cluster.metadata import MetadataError, validate_topic_name


@pytest.mark.parametrize("name", ["foo\n", "foo\r\n", "\nfoo", "fo o", "tópico", "ｆｏｏ", "foo/bar", "", ".",
                                  "..", "x" * 250])
def test_a_name_with_any_char_outside_the_legal_set_is_refused(name: str) -> None:
    """"foo\\n" passed: the pattern ended in "$", which matches before a final newline."""
    with pytest.raises(MetadataError) as refused:
        validate_topic_name(name)
    assert refused.value.error == "invalid_topic_exception"
    assert str(refused.value).startswith("Topic name is invalid: ")


@pytest.mark.parametrize("name", ["foo", "a.b_c-D9", "x" * 249, "__consumer_offsets"])
def test_legal_names_pass(name: str) -> None:
    validate_topic_name(name)
