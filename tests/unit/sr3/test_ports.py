"""NodeInfo registrations and MembershipChange: a rejoin is a departure too."""

from __future__ import annotations

from sr3.ports import MembershipChange, NodeInfo

N1 = NodeInfo("n1", "10.0.0.1", 7001, incarnation=0x10)
N2 = NodeInfo("n2", "10.0.0.2", 7002, incarnation=0x11)


def test_the_incarnation_is_no_part_of_the_record_nor_of_equality() -> None:
    again = NodeInfo("n1", "10.0.0.1", 7001, incarnation=0x20)
    assert again == N1
    assert hash(again) == hash(N1)
    assert "incarnation" not in N1.to_dict()
    assert NodeInfo.from_dict(N1.to_dict()).incarnation is None


def test_same_registration_compares_incarnations_when_both_are_known() -> None:
    assert N1.same_registration(NodeInfo("n1", "10.0.0.1", 7001, incarnation=0x10))
    assert not N1.same_registration(NodeInfo("n1", "10.0.0.1", 7001, incarnation=1))
    assert not N1.same_registration(NodeInfo("n2", "10.0.0.1", 7001, incarnation=0x10))
    # unknown on either side: the id decides, as before incarnations existed
    assert N1.same_registration(NodeInfo("n1", "10.0.0.9", 9))


def test_a_rejoin_between_two_snapshots_is_a_departure_and_an_arrival() -> None:
    rejoined = NodeInfo("n1", "10.0.0.1", 7001, incarnation=0x30)
    change = MembershipChange.between({"n1": N1, "n2": N2}, {"n1": rejoined, "n2": N2})
    assert change.left == (N1,)
    assert change.left[0].incarnation == 0x10
    assert change.joined[0].incarnation == 0x30
    assert change.rejoined == ("n1",)
    assert change


def test_plain_departures_and_arrivals() -> None:
    change = MembershipChange.between({"n1": N1}, {"n2": N2})
    assert (change.left, change.joined, change.rejoined) == ((N1,), (N2,), ())
    assert not MembershipChange.between({"n1": N1}, {"n1": N1})
    assert MembershipChange.between({}, {"n1": N1}).joined == (N1,)
