"""The search-tool environment: the Search-R1 protocol, rewards, retrievers and datasets; no policy model."""
