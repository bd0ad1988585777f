"""OpenAI's Responses API: routes, the conversion to a native call and the typed stream events."""
