"""``DiskSort``: rows come back in key order (ties in the order they were added), the same
whether they stayed in memory or went to disk, as often as they are read."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flow_cli.ops.disk_sort import DiskSort

keys = st.tuples(st.integers(0, 3), st.integers(-(2**62), 2**62), st.sampled_from("abc"))
rows = st.lists(st.tuples(keys, st.text(max_size=5)), max_size=60)


@given(rows, st.integers(0, 10))
def test_rows_come_back_in_key_order_in_memory_or_on_disk(added: list, hold: int) -> None:  # type: ignore[type-arg]
    sort = DiskSort(width=2, hold=hold)
    for n, (key, text) in enumerate(added):
        sort.add(key, (text, str(n)))
    expected = [
        (text, str(n)) for n, (key, text) in sorted(enumerate(added), key=lambda x: (x[1][0], x[0]))
    ]
    assert len(sort) == len(added)
    assert sort.on_disk == (len(added) > hold)
    assert list(sort) == expected
    assert list(sort) == expected  # read again
    assert sort.slice(1, 4) == expected[1:4]
    sort.close()


def test_a_row_of_the_wrong_width_is_refused() -> None:
    with pytest.raises(ValueError, match="expected 2"):
        DiskSort(width=2).add((0, 0, ""), ("only one",))
