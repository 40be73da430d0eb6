import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from src.data.tokenizer import CharTokenizer

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak."


def test_vocab_is_the_sorted_set_of_characters():
    tok = CharTokenizer.from_text(TEXT)
    assert tok.vocab == sorted(set(TEXT))
    ids = tok.encode("hear me")
    assert ids.dtype == torch.long and ids.shape == (7,)
    assert tok.decode(ids) == "hear me"
    assert tok.decode([0, 1]) == tok.vocab[0] + tok.vocab[1]


def test_unknown_characters_are_named_and_counted():
    tok = CharTokenizer.from_text(TEXT)
    with pytest.raises(ValueError, match=r"1 character\(s\) not in the vocabulary: 'Z'"):
        tok.encode("Zounds")
    with pytest.raises(ValueError, match=r"9 character\(s\).* and 4 more"):
        tok.encode("0123456789"[:9] + "hear")


def test_round_trips_through_a_plain_dict():
    tok = CharTokenizer.from_text(TEXT)
    again = CharTokenizer.from_dict(tok.to_dict())
    assert again == tok and again.vocab_size == tok.vocab_size


@given(st.text(alphabet=sorted(set(TEXT)), max_size=200))
def test_encode_decode_round_trip_over_the_vocab(text):
    tok = CharTokenizer.from_text(TEXT)
    assert tok.decode(tok.encode(text)) == text


def test_an_empty_vocabulary_is_refused():
    with pytest.raises(ValueError, match="empty"):
        CharTokenizer.from_text("")
