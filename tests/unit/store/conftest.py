"""Store fixtures (a fresh store, the snapshot helper, a tiny model) shared with the integration tier."""

from storefixtures import snap, snapshot, store, tiny_model  # noqa: F401  (pytest finds fixtures by name)
