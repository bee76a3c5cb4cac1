"""streamparse/pystorm integration: stateful bolts, replayable spouts, local cluster."""
