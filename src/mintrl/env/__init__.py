"""Environments for multi-turn agent episodes (``env=`` config group): the contract in ``base``."""
