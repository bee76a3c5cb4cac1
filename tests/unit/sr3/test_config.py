"""``sr3.config``: sizes and ZooKeeper addresses are refused with the fix named."""

from __future__ import annotations

import pytest

from sr3.config import Sr3Config, ZkConfig, check_zk_hosts, parse_size
from sr3.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "size"),
    [("200MB", 200_000_000), ("1GiB", 1024**3), ("4096", 4096), ("0", 0)],
)
def test_sizes_parse(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["12XB", "-5MB", "", "nan", "inf", "-inf", "MB"])
def test_non_sizes_say_how_to_write_one(text: str) -> None:
    with pytest.raises(ConfigError, match="as 200MB or 1GiB"):
        parse_size(text)


def test_sizes_beyond_64_bits_are_refused() -> None:
    with pytest.raises(ConfigError, match="too large"):
        parse_size("1e30")


@pytest.mark.parametrize(
    "hosts",
    [
        "",
        "127.0.0.1:2181",
        "zk1:2181,zk2:2181",
        "localhost",
        "[::1]:2181",
        "zk1:2181,zk2:2181/app",  # a chroot suffix, as kazoo takes it
    ],
)
def test_zookeeper_addresses_accepted(hosts: str) -> None:
    assert check_zk_hosts(hosts) == hosts
    assert ZkConfig(hosts=hosts).hosts == hosts


@pytest.mark.parametrize(
    "hosts",
    ["::::", "127.0.0.1:99999", "h:0", "a,,b", ":2181", "h:x", "h:1:2", "/app"],
)
def test_zookeeper_addresses_refused_with_the_form(hosts: str) -> None:
    with pytest.raises(ConfigError, match="HOST:PORT"):
        ZkConfig(hosts=hosts)


def test_environment_zookeeper_address_is_checked() -> None:
    with pytest.raises(ConfigError, match="HOST:PORT"):
        Sr3Config.from_env({"SR3_ZK_HOSTS": "garbage::"})


def test_zookeeper_connect_timeout_must_be_positive() -> None:
    with pytest.raises(ConfigError, match=r"sr3\.zk\.connect\.timeout\.s"):
        Sr3Config.from_mapping({"sr3.zk.connect.timeout.s": 0})


def test_known_keys_round_trip() -> None:
    assert set(Sr3Config.known_keys()) == set(Sr3Config().to_mapping())


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("sr3.zk.session.timeout.s", "1e9"),
        ("sr3.zk.connect.timeout.s", "inf"),
        ("sr3.node.io.timeout.s", "1e12"),
        ("sr3.node.connect.timeout.s", "nan"),
        ("sr3.repair.grace.s", "-1"),
        ("sr3.repair.scrub.interval.s", "1e300"),
        ("sr3.recovery.latency.target.s", "0"),
    ],
)
def test_durations_must_be_finite_and_bounded(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"{key}=.*<= 1000000 seconds"):
        Sr3Config.from_mapping({key: value})
