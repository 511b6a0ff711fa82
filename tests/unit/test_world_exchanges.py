"""The world's exchange log keeps the newest exchanges within its count and byte bounds."""

from __future__ import annotations

from agentsaga_lab.world.exchanges import Exchange, ExchangeLog


def exchange(path: str, body: bytes = b"", answer: bytes = b"") -> Exchange:
    return Exchange("GET", path, (), (("Accept", "application/json"),), body, 200, (), answer)


def test_the_oldest_exchanges_go_first_when_a_bound_is_passed() -> None:
    by_count = ExchangeLog(limit=3)
    for i in range(5):
        by_count.add(exchange(f"/{i}"))
    assert [e.path for e in by_count.list()] == ["/2", "/3", "/4"]
    by_bytes = ExchangeLog(max_bytes=25)
    for i in range(4):
        by_bytes.add(exchange(f"/{i}", b"01234", b"56789"))
    assert [e.path for e in by_bytes.list()] == ["/2", "/3"]
    by_bytes.add(exchange("/big", answer=b"x" * 100))  # one alone over the bound is kept
    assert [e.path for e in by_bytes.list()] == ["/big"]
    by_bytes.clear()
    assert by_bytes.list() == []


def test_an_exchange_reads_its_headers_by_any_case() -> None:
    assert exchange("/").header("accept") == "application/json"
    assert exchange("/").header("Idempotency-Key") is None
    assert exchange("/", b"a=1").to_dict()["body"] == "a=1"
