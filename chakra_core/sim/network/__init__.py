"""The network layer: how a message travels, behind one interface (interface.Network) that the
congestion-unaware (unaware) and congestion-aware (aware) back-ends implement."""
