"""Code the test tiers share: simulated and real servers started as processes, a gateway, a
Prometheus, loopback HTTP servers that misbehave, Textual pilot waits, CSV readers."""
