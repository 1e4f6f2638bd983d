"""attnkit inside other frameworks: `attnkit.integrations.transformers`
registers attnkit as a Hugging Face Transformers attention backend."""
