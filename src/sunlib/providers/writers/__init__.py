"""Writers: ``extractive`` (offline default), ``openai`` (any compatible endpoint), ``llama-cpp`` (local GGUF)."""
