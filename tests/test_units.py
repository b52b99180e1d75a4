import pytest

from simulator.units import UnitError, format_size, parse_clock, parse_rate, parse_size, parse_time


@pytest.mark.parametrize(
    "text, expected",
    [
        ("64KiB", 65536),
        ("32MiB", 32 * 1024**2),
        ("1.5GB", 1_500_000_000),
        ("1KB", 1000),
        ("512B", 512),
        ("2 GiB", 2 * 1024**3),
        (4096, 4096),
        ("1TB", 10**12),
    ],
)
def test_sizes(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    "bad", ["42KX", "KiB", "-1KiB", "0B", "1.5B", "64 kib", "", "64", True, None, [1], "1e400GB"]
)
def test_bad_sizes_are_refused(bad):
    with pytest.raises(UnitError):
        parse_size(bad)


def test_rates_convert_to_bytes_per_cycle():
    assert parse_rate("1.2TB/s", 1e9) == pytest.approx(1200.0)
    assert parse_rate("128B/cycle", 1e9) == 128.0
    assert parse_rate("1GiB/s", 2e9) == pytest.approx(1024**3 / 2e9)


@pytest.mark.parametrize("bad", ["1.2TB", "12 cycles/B", "fastB/s", "0B/cycle", "1.2Tb/s"])
def test_bad_rates_are_refused(bad):
    with pytest.raises(UnitError):
        parse_rate(bad, 1e9)


def test_times_become_whole_cycles():
    assert parse_time("500ns", 1e9) == 500
    assert parse_time("3us", 1e9) == 3000
    assert parse_time("200cycles", 1e9) == 200
    assert parse_time("1ns", 1.5e9) == 2  # 1.5 cycles round up
    assert parse_time("0cycles", 1e9) == 0


@pytest.mark.parametrize("bad", ["500", 500, "5 parsecs", "-3ns", "ns"])
def test_bad_times_are_refused(bad):
    with pytest.raises(UnitError):
        parse_time(bad, 1e9)


def test_clocks():
    assert parse_clock("1.0GHz") == 1e9
    assert parse_clock("800MHz") == 8e8
    for bad in ("1.0 GHz/s", "fast", "0GHz"):
        with pytest.raises(UnitError):
            parse_clock(bad)


def test_format_size():
    assert format_size(65536) == "64.0 KiB"
    assert format_size(100) == "100 B"
    assert format_size(5 * 1024**4) == "5120.0 GiB"


def test_format_bytes_decimal():
    from simulator.units import format_bytes_decimal

    assert format_bytes_decimal(270532608) == "270.5 MB"
    assert format_bytes_decimal(999) == "999 B"
