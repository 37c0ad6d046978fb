"""Which bytes a Range header asks for: one range honoured, several or a malformed one ignored (the whole file), one
past the end refused."""

from __future__ import annotations

import pytest

from webapp.core.files import byte_range


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("bytes=0-99", (0, 99)),
        ("bytes=900-", (900, 999)),
        ("bytes=990-5000", (990, 999)),
        ("bytes=-100", (900, 999)),
        ("bytes=-5000", (0, 999)),
        ("bytes=1000-", False),
        ("bytes=-0", False),
        ("bytes=5-2", None),
        ("bytes=0-1,5-9", None),
        ("items=0-9", None),
        ("bytes=-", None),
        ("", None),
    ],
)
def test_byte_range(header, expected):
    assert byte_range(header, 1000) == expected


def test_an_empty_file_has_no_range():
    assert byte_range("bytes=0-", 0) is False and byte_range("bytes=-1", 0) is False
