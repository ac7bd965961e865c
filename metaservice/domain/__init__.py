"""Plain data the layers share: the protocol's planning state (`world`)."""
