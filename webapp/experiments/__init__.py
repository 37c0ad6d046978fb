"""Experiments: arms × seeds over one base config, compared on the same questions."""
