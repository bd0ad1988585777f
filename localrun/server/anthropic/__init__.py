"""Anthropic's Messages API: routes, the conversion to a native call and the stream of events."""
