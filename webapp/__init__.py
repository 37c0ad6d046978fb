"""The INSPO web platform: a Django project whose apps (accounts, runs) sit beside its config package."""
