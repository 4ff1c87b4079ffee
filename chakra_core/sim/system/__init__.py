"""The system layer: a collective matched across its group and sends with receives (matching,
live), timed by closed forms (collectives, plan), packet machines (packets, tree) and holding
tables (holding); messages go down to the network layer."""
