"""Third-party daemons a lab runs from their own jars (Apache Kafka)."""
