"""The example services' idempotent ledger, which the crash and load tests count effects with."""

from __future__ import annotations

from pathlib import Path

import pytest

from workflows_example import services


@pytest.fixture(autouse=True)
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("FLOW_EXAMPLE_LEDGER", str(path))
    return path


def test_an_effect_is_applied_once_per_key() -> None:
    assert services.apply_once("run-1/s1/effect", {"attempt": 1})
    assert not services.apply_once("run-1/s1/effect", {"attempt": 2})
    assert services.read_ledger() == [{"key": "run-1/s1/effect", "attempt": 1}]


def test_keys_that_share_a_prefix_or_need_escaping_are_told_apart() -> None:
    keys = ["k1", "k10", "k", 'quote"d', "back\\slash", "naïve", "new\nline"]
    assert all(services.apply_once(key, {}) for key in keys)
    assert not any(services.apply_once(key, {"again": True}) for key in keys)
    assert [row["key"] for row in services.read_ledger()] == keys


def test_an_effect_without_other_fields_is_still_found() -> None:
    assert services.apply_once("bare", {})
    assert not services.apply_once("bare", {})
    assert len(services.read_ledger()) == 1
