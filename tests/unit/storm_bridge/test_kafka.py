"""``storm_bridge.kafka`` keeps its public names, defined in ``topology_api.kafka``."""

from __future__ import annotations

import storm_bridge.kafka as storm_kafka
from topology_api.kafka.errors import KafkaTopicMissingError
from topology_api.kafka.settings import SinkSettings, SpoutSettings, partition_key
from topology_api.kafka.writers import transactional_id


def test_users_import_settings_errors_and_helpers_from_storm_bridge_kafka() -> None:
    assert storm_kafka.SpoutSettings is SpoutSettings
    assert storm_kafka.SinkSettings is SinkSettings
    assert storm_kafka.KafkaTopicMissingError is KafkaTopicMissingError
    assert storm_kafka.partition_key is partition_key
    assert storm_kafka.transactional_id is transactional_id
    assert storm_kafka.KafkaSink.__module__ == "storm_bridge.kafka.sink"
    assert storm_kafka.KafkaSpout.__module__ == "storm_bridge.kafka.spout"
