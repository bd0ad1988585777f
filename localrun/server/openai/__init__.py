"""OpenAI's chat completions, completions, embeddings and models: routes and conversions."""
