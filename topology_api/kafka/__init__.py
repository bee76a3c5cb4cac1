"""Kafka settings, errors, epoch delivery and sink writers, shared by both engines.

The settings and errors import without confluent-kafka; :mod:`.delivery` and
:mod:`.writers` load it.
"""
